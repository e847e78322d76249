#!/usr/bin/env bash
# Install (if needed) and start a local Virtuoso 7.2 SPARQL server for the KG task's remote-backend
# tests. Run as root on Debian (bookworm: package virtuoso-opensource 7.2.5). No systemd needed.
#
# Idempotent: safe to run twice; a server whose /sparql already answers is reused.
# Its stdout carries exactly one line, everything else goes to stderr:
#     export AGENTRL_TEST_SPARQL_URL=http://127.0.0.1:8890/sparql
# so CI does:  line=$(bash .ci/kg-sparql.sh); eval "$line"
#
# Settings (environment):
#   AGENTRL_VIRTUOSO_DIR        database, ini and log  (default /var/lib/agentrl-virtuoso)
#   AGENTRL_VIRTUOSO_HTTP_PORT  HTTP / SPARQL port     (default 8890), bound to 127.0.0.1 only
#   AGENTRL_VIRTUOSO_ISQL_PORT  SQL (isql) port        (default 1111), bound to 127.0.0.1 only
#   AGENTRL_VIRTUOSO_BUFFERS    NumberOfBuffers, 8 KiB each (default 170000, about 1.3 GiB)
# The DBA login is dba/dba (loopback only; it is a throwaway test server).
#
# Endpoints (HTTP_PORT=8890):
#   SPARQL query/update: http://127.0.0.1:8890/sparql          (GET ?query= or POST form query=...)
#     curl -s -H 'Accept: application/sparql-results+json' \
#          --data-urlencode 'query=SELECT * WHERE { ?s ?p ?o } LIMIT 5' http://127.0.0.1:8890/sparql
#     A query without FROM sees the union of all graphs.
#   Graph Store HTTP Protocol (no auth; the SPARQL user is granted SPARQL_UPDATE by this script):
#     http://127.0.0.1:8890/sparql-graph-crud?graph-uri=GRAPH
#     add to a graph:    curl -sf -X POST -H 'Content-Type: application/n-triples' \
#                          --data-binary @g.nt 'http://127.0.0.1:8890/sparql-graph-crud?graph-uri=http://example.org/g'
#     replace a graph:   same with -X PUT
#     drop a graph:      curl -sf -X DELETE 'http://127.0.0.1:8890/sparql-graph-crud?graph-uri=http://example.org/g'
#     (text/turtle works too.)
#   Fast bulk load (files over ~100k triples; bypasses HTTP). The file must lie under a DirsAllowed
#   directory: /tmp, ${DIR}/import, or the current directory of the server (${DIR}):
#     isql-vt 127.0.0.1:1111 dba dba exec="ld_dir('/tmp/kg', 'big.nt', 'http://example.org/g'); rdf_loader_run(); checkpoint;"
#     (ld_dir(dir, glob, graph) registers files in DB.DBA.LOAD_LIST; rdf_loader_run() loads them;
#      a file is only loaded once: DELETE FROM DB.DBA.LOAD_LIST to reload; .nt, .ttl, .nt.gz work.)
#   or, for one file:
#     isql-vt 127.0.0.1:1111 dba dba exec="DB.DBA.TTLP_MT(file_to_string_output('/tmp/kg/big.nt'), '', 'http://example.org/g', 0); checkpoint;"
#   Drop a big graph fast:  isql-vt 127.0.0.1:1111 dba dba exec="SPARQL CLEAR GRAPH <http://example.org/g>;"
#
# Log: ${DIR}/virtuoso.log (Virtuoso's own), ${DIR}/virtuoso.out (the process's stdout/stderr).
# Stop:  isql-vt 127.0.0.1:1111 dba dba -K     (or kill "$(cat ${DIR}/virtuoso.pid)")
# Wipe:  stop it, then rm -rf ${DIR}
set -euo pipefail
# fd 3 is the real stdout, kept for the export line; every command's stdout goes to stderr.
exec 3>&1 1>&2
export DEBIAN_FRONTEND=noninteractive

DIR="${AGENTRL_VIRTUOSO_DIR:-/var/lib/agentrl-virtuoso}"
HTTP_PORT="${AGENTRL_VIRTUOSO_HTTP_PORT:-8890}"
ISQL_PORT="${AGENTRL_VIRTUOSO_ISQL_PORT:-1111}"
BUFFERS="${AGENTRL_VIRTUOSO_BUFFERS:-170000}"
URL="http://127.0.0.1:${HTTP_PORT}/sparql"
log() { echo "[kg-sparql.sh] $*" >&2; }

answers() {
    curl -sf -m 10 -H 'Accept: application/sparql-results+json' \
        --data-urlencode 'query=ASK { ?s ?p ?o }' "${URL}" >/dev/null 2>&1
}

if ! command -v virtuoso-t >/dev/null 2>&1 || ! command -v isql-vt >/dev/null 2>&1 \
        || ! command -v curl >/dev/null 2>&1; then
    log "installing virtuoso-opensource"
    # The package's postinst asks for a DBA password and starts the Debian default instance with
    # invoke-rc.d: preseed an empty password (no question) and forbid starting services for the
    # install with a policy-rc.d (exit 101), unless the machine already has one.
    printf '%s\n' \
        'virtuoso-opensource-7 virtuoso-opensource-7/dba-password password' \
        'virtuoso-opensource-7 virtuoso-opensource-7/dba-password-again password' \
        | debconf-set-selections
    made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get update -qq >&2
    apt-get install -y -qq virtuoso-opensource curl >&2 </dev/null
    if [ -n "${made_policy}" ]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
fi

ISQL="$(command -v isql-vt)"
isql() {  # isql SQL...: run statements as dba; fail on an SQL error
    local out
    out="$("${ISQL}" "127.0.0.1:${ISQL_PORT}" dba dba VERBOSE=OFF BANNER=OFF PROMPT=OFF ECHO=OFF \
        ERRORS=STDOUT exec="$*" </dev/null 2>&1)" || { echo "${out}" >&2; return 1; }
    echo "${out}"
    if grep -q '\*\*\* Error' <<<"${out}"; then return 1; fi
}

if answers; then
    log "a SPARQL server already answers on ${URL}: reusing it"
else
    install -d "${DIR}" "${DIR}/import"
    # Our own ini, rewritten on each start; the database files in ${DIR} are kept.
    cat >"${DIR}/virtuoso.ini" <<INI
; written by .ci/kg-sparql.sh
[Database]
DatabaseFile       = ${DIR}/virtuoso.db
ErrorLogFile       = ${DIR}/virtuoso.log
LockFile           = ${DIR}/virtuoso.lck
TransactionFile    = ${DIR}/virtuoso.trx
xa_persistent_file = ${DIR}/virtuoso.pxa
ErrorLogLevel      = 7
FileExtend         = 200
MaxCheckpointRemap = 2000
Striping           = 0
TempStorage        = TempDatabase

[TempDatabase]
DatabaseFile       = ${DIR}/virtuoso-temp.db
TransactionFile    = ${DIR}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping           = 0

[Parameters]
ServerPort               = 127.0.0.1:${ISQL_PORT}
LiteMode                 = 0
DisableUnixSocket        = 1
DisableTcpSocket         = 0
MaxClientConnections     = 20
CheckpointInterval       = 60
O_DIRECT                 = 0
CaseMode                 = 2
MaxStaticCursorRows      = 5000
CheckpointAuditTrail     = 0
AllowOSCalls             = 0
SchedulerInterval        = 10
DirsAllowed              = ., ${DIR}/import, /tmp, /usr/share/virtuoso-opensource-7/vad
ThreadCleanupInterval    = 0
ThreadThreshold          = 10
ResourcesCleanupInterval = 0
FreeTextBatchSize        = 100000
SingleCPU                = 0
VADInstallDir            = /usr/share/virtuoso-opensource-7/vad/
PrefixResultNames        = 0
RdfFreeTextRulesSize     = 100
IndexTreeMaps            = 64
MaxQueryMem              = 2G
VectorSize               = 1000
MaxVectorSize            = 1000000
AdjustVectorSize         = 0
ThreadsPerQuery          = 4
AsyncQueueMaxThreads     = 10
NumberOfBuffers          = ${BUFFERS}
MaxDirtyBuffers          = $((BUFFERS * 3 / 4))

[HTTPServer]
ServerPort                  = 127.0.0.1:${HTTP_PORT}
ServerRoot                  = /var/lib/virtuoso-opensource-7/vsp
MaxClientConnections        = 20
DavRoot                     = DAV
EnabledDavVSP               = 0
HTTPProxyEnabled            = 0
TempASPXDir                 = 0
ServerThreads               = 20
MaxKeepAlives               = 10
KeepAliveTimeout            = 10
MaxCachedProxyConnections   = 10
ProxyConnectionCacheTimeout = 15
HTTPThreadSize              = 280000
HttpPrintWarningsInOutput   = 0
Charset                     = UTF-8
MaintenancePage             = atomic.html
EnabledGzipContent          = 1

[AutoRepair]
BadParentLinks = 0

[Client]
SQL_PREFETCH_ROWS  = 100
SQL_PREFETCH_BYTES = 16000
SQL_QUERY_TIMEOUT  = 0
SQL_TXN_TIMEOUT    = 0

[URIQA]
DynamicLocal = 0
DefaultHost  = 127.0.0.1:${HTTP_PORT}

[SPARQL]
; no silent truncation of results, no "anytime" partial answers on a timeout
ResultSetMaxRows           = 1000000
MaxQueryCostEstimationTime = 0
MaxQueryExecutionTime      = 0
DefaultGraph               =
DeferInferenceRulesInit    = 0
INI
    rm -f "${DIR}/virtuoso.lck"
    log "starting virtuoso-t on 127.0.0.1:${HTTP_PORT} (http) and 127.0.0.1:${ISQL_PORT} (isql); log: ${DIR}/virtuoso.log"
    # 3>&- and setsid: the server must not hold the caller's stdout (fd 3), or
    # `line=$(.ci/kg-sparql.sh)` waits for it to exit, i.e. forever.
    (
        cd "${DIR}"
        setsid nohup virtuoso-t +foreground +configfile "${DIR}/virtuoso.ini" \
            </dev/null >"${DIR}/virtuoso.out" 2>&1 3>&- &
        echo $! >"${DIR}/virtuoso.pid"
    )
    for _ in $(seq 1 120); do
        answers && break
        if ! kill -0 "$(cat "${DIR}/virtuoso.pid")" 2>/dev/null; then
            break
        fi
        sleep 1
    done
    if ! answers; then
        log "ERROR: Virtuoso did not answer on ${URL} within 120 s; last lines of ${DIR}/virtuoso.log and virtuoso.out:"
        tail -n 30 "${DIR}/virtuoso.log" >&2 || true
        tail -n 30 "${DIR}/virtuoso.out" >&2 || true
        exit 1
    fi
fi

# Let the Graph Store endpoint /sparql-graph-crud (which runs as user "SPARQL") write, and let
# SPARQL/Update on /sparql write too. Idempotent.
log "granting SPARQL_UPDATE to the SPARQL user (Graph Store protocol without auth)"
# (A second GRANT fails with "already have role": that is the state we want.)
if ! out="$(isql 'GRANT SPARQL_UPDATE TO "SPARQL";')" && ! grep -q 'already have role' <<<"${out}"; then
    echo "${out}" >&2
    log "ERROR: isql on 127.0.0.1:${ISQL_PORT} failed"
    exit 1
fi
isql "DB.DBA.RDF_DEFAULT_USER_PERMS_SET ('nobody', 7); checkpoint;" >/dev/null \
    || { log "ERROR: isql on 127.0.0.1:${ISQL_PORT} failed"; exit 1; }

log "Virtuoso is up: ${URL} (graph store: http://127.0.0.1:${HTTP_PORT}/sparql-graph-crud)"
echo "export AGENTRL_TEST_SPARQL_URL=${URL}" >&3
