#!/usr/bin/env bash
# Install (if needed) and start a local MariaDB on 127.0.0.1:3306 for the `mariadb` tests.
#
# Idempotent: safe to run twice; a running server is reused. Run as root on Debian/Ubuntu.
# Creates user agentrl/agentrl with every privilege, GRANT OPTION included: the DB task's MySQL
# backend creates one database *and one user* per session, so the admin user needs CREATE USER.
# Prints the line to eval:  eval "$(.ci/mariadb.sh)"  (or, as before, `| tail -n1`)
# Its stdout carries exactly that one line: everything else goes to stderr.
set -euo pipefail
# fd 3 is the real stdout, kept for the export line; every command's stdout goes to stderr.
exec 3>&1 1>&2

PORT="${MARIADB_PORT:-3306}"
log() { echo "[mariadb.sh] $*" >&2; }

if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1; then
    log "installing mariadb-server"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client >&2
fi

ping() { mariadb-admin --protocol=socket -uroot ping >/dev/null 2>&1 || mysqladmin -uroot ping >/dev/null 2>&1; }

if ! ping; then
    if [ ! -d /var/lib/mysql/mysql ]; then
        log "initialising the data directory"
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql >&2
    fi
    install -d -o mysql -g mysql /run/mysqld
    log "starting mariadbd on 127.0.0.1:${PORT}"
    # 3>&-: the server must not hold the caller's stdout (fd 3): `line=$(.ci/mariadb.sh)` waits for
    # every writer of that pipe to close it, so an inherited fd 3 hung CI for its whole 90 minutes.
    nohup mysqld_safe --user=mysql --bind-address=127.0.0.1 --port="${PORT}" >/tmp/mariadb.log 2>&1 3>&- &
    for _ in $(seq 1 60); do
        ping && break
        sleep 1
    done
    ping || { log "MariaDB did not start; see /tmp/mariadb.log"; exit 1; }
fi

# root connects through the unix socket (unix_socket auth, Debian's default).
mariadb --protocol=socket -uroot <<'SQL'
DELETE FROM mysql.global_priv WHERE User = '';
CREATE USER IF NOT EXISTS 'agentrl'@'%' IDENTIFIED BY 'agentrl';
CREATE USER IF NOT EXISTS 'agentrl'@'localhost' IDENTIFIED BY 'agentrl';
GRANT ALL PRIVILEGES ON *.* TO 'agentrl'@'%' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'agentrl'@'localhost' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL

for _ in $(seq 1 30); do
    mariadb -h127.0.0.1 -P"${PORT}" -uagentrl -pagentrl -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 1
done
mariadb -h127.0.0.1 -P"${PORT}" -uagentrl -pagentrl -e 'SELECT 1' >/dev/null || { log "cannot log in as agentrl over TCP"; exit 1; }
log "MariaDB is up: $(mariadb -h127.0.0.1 -P"${PORT}" -uagentrl -pagentrl -N -e 'SELECT VERSION()')"
echo "export AGENTRL_TEST_MYSQL_URL=mysql://agentrl:agentrl@127.0.0.1:${PORT}" >&3
