'use strict';
// AgentRL's worker protocol over HTTP, Node.js standard library only (Node >= 18).
//
// serve(task, argv) runs a worker of `task` (see task.js for the shape a task has):
//
//   POST /api/start_sample  {index, custom_task, session_id} -> {messages, tools, status, finish, reward, metric}
//                           (the session id also in the `session_id` header); 406 when full
//   POST /api/interact      {session_id, messages} -> {session_id, env_out: {messages, status, finish, reward, metric}}
//   POST /api/cancel        {session_id} -> {session_id};  POST /api/cancel_all -> {cancelled}
//   GET  /api/get_sessions  {session_id: index};  GET /api/get_indices  [index, ...]
//   GET  /api/worker_status {concurrency, current};  GET /api/reference?index=I  {index, messages} (404: none)
//   GET  /health            {status: "ok", task, concurrency, current} (open even with a worker secret)
//
// and beats to the controller (POST {controller}/receive_heartbeat {name, address, concurrency,
// indices}) every --heartbeat-interval seconds, every 0.25 s until the controller first answers.
// Errors leave as {detail, error, data} with agentrl-envs' codes and statuses. The loop is
// AgentRL's (docs/conformance.md): a bad tool call is answered with a tool message and counts as a
// round; a round without a tool call gets the task's user message; --max-turns rounds without an
// end finish "task limit reached" with reward 0; a session idle for --idle-timeout s is dropped.

const crypto = require('node:crypto');
const http = require('node:http');
const https = require('node:https');

/** A mistake of the model (unknown tool, bad arguments): answered with a tool message, scored. */
class ToolError extends Error {}

const STATUS = {
  running: 'running',
  completed: 'completed',
  limit: 'task limit reached',
  taskError: 'task error',
  cancelled: 'cancelled',
};
const LEVELS = { debug: 10, info: 20, warning: 30, error: 40, critical: 50 };
const FLAGS = {
  '--controller': 'controller', '--host': 'host', '--port': 'port', '--self': 'self', '--split': 'split',
  '--concurrency': 'concurrency', '--idle-timeout': 'idleTimeout', '--heartbeat-interval': 'heartbeatInterval',
  '--log-level': 'logLevel', '--option': 'option',
};
const MAX_BODY = 16 * 1024 * 1024;

function parseArgs(task, argv) {
  const env = process.env;
  const opts = {
    controller: env.CONTROLLER || null, host: env.HOST || '127.0.0.1', port: env.PORT || '5021', self: null,
    split: task.splits[0], concurrency: String(task.concurrency), idleTimeout: '300', heartbeatInterval: '8',
    logLevel: 'info', options: {},
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = FLAGS[argv[i]];
    if (!key || i + 1 >= argv.length) throw new Error(`unknown flag or missing value: ${argv[i]}`);
    if (key === 'option') {
      const [k, ...v] = argv[i + 1].split('=');
      if (!v.length) throw new Error(`--option expects KEY=VALUE, got ${argv[i + 1]}`);
      opts.options[k] = v.join('=');
    } else {
      opts[key] = argv[i + 1];
    }
  }
  for (const key of ['port', 'concurrency', 'idleTimeout', 'heartbeatInterval']) {
    opts[key] = Number(opts[key]);
    if (!(opts[key] > 0)) throw new Error(`--${key} must be a positive number`);
  }
  if (!(opts.logLevel in LEVELS)) throw new Error(`--log-level must be one of ${Object.keys(LEVELS).join(', ')}`);
  if (!task.splits.includes(opts.split)) throw new Error(`task ${task.name} has no split ${opts.split}; its splits are ${task.splits}`);
  const unknown = Object.keys(opts.options).filter((k) => !(k in (task.options || {})));
  if (unknown.length) throw new Error(`task ${task.name} has no option ${unknown[0]}`);
  if (opts.controller && !opts.controller.replace(/\/+$/, '').endsWith('/api')) opts.controller = opts.controller.replace(/\/+$/, '') + '/api';
  opts.self = opts.self || `http://${opts.host === '0.0.0.0' ? '127.0.0.1' : opts.host}:${opts.port}/api`;
  return opts;
}

/** The arguments of a call, checked against the tool's JSON Schema (required, types). */
function checkArguments(tool, raw) {
  let args;
  try {
    args = JSON.parse(raw || '{}');
  } catch (e) {
    throw new ToolError(`the arguments of \`${tool.name}\` are not valid JSON (${e.message})`);
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw new ToolError(`the arguments of \`${tool.name}\` must be a JSON object`);
  }
  const schema = tool.parameters || {};
  for (const name of schema.required || []) {
    if (!(name in args)) throw new ToolError(`\`${tool.name}\` is missing its required argument \`${name}\``);
  }
  for (const [name, value] of Object.entries(args)) {
    const spec = (schema.properties || {})[name];
    if (!spec) throw new ToolError(`\`${tool.name}\` takes no argument \`${name}\``);
    const ok = {
      number: typeof value === 'number', integer: Number.isInteger(value), string: typeof value === 'string',
      boolean: typeof value === 'boolean', array: Array.isArray(value), object: value !== null && typeof value === 'object',
    }[spec.type];
    if (ok === false) throw new ToolError(`the argument \`${name}\` of \`${tool.name}\` must be of type ${spec.type}`);
  }
  return args;
}

function textOf(content) {
  if (typeof content === 'string') return content;
  return Array.isArray(content) ? content.map((p) => (p && p.text) || '').join('') : '';
}

/** agentrl-eval's renewal: one assistant message, content exactly "", no tool call, no other field. */
function isRenewal(messages) {
  if (!Array.isArray(messages) || messages.length !== 1) return false;
  const m = messages[0];
  return Boolean(m) && m.role === 'assistant' && m.content === '' && !(m.tool_calls && m.tool_calls.length)
    && Object.keys(m).every((k) => ['role', 'content', 'tool_calls'].includes(k));
}

class HttpError extends Error {
  constructor(status, code, detail, data = {}) {
    super(detail);
    this.status = status;
    this.code = code;
    this.data = data;
  }
}

/** The sessions of one task: the episode loop, capacity and idle expiry. */
class Sessions {
  constructor(task, opts, log) {
    this.task = task;
    this.opts = opts;
    this.log = log;
    this.samples = task.loadSamples(opts.split);
    this.tools = task.tools.map((t) => ({ type: 'function', function: t }));
    this.byName = new Map(task.tools.map((t) => [t.name, t]));
    this.live = new Map();
  }

  get indices() {
    return this.samples.map((_, i) => i);
  }

  status() {
    return { concurrency: this.opts.concurrency, current: this.live.size };
  }

  sample(index, customTask) {
    if (index === -1 && customTask) return customTask;
    const i = typeof index === 'string' && /^-?\d+$/.test(index) ? Number(index) : index;
    if (!Number.isInteger(i) || i < 0 || i >= this.samples.length) {
      throw new HttpError(404, 'unknown_sample', `task ${this.task.name} has no sample ${JSON.stringify(index)} (indices 0..${this.samples.length - 1})`);
    }
    return this.samples[i];
  }

  output(s, messages) {
    return { messages, status: s.status, finish: s.status !== STATUS.running, reward: s.reward, metric: { turns: s.turns, tool_errors: s.toolErrors, ...s.metrics } };
  }

  start({ index, custom_task: customTask, session_id: id }) {
    if (!Number.isInteger(id)) throw new HttpError(422, 'invalid_request', 'session_id must be an integer');
    if (this.live.has(id)) throw new HttpError(400, 'session_error', `session ${id} already exists on this worker`);
    if (this.live.size >= this.opts.concurrency) {
      throw new HttpError(406, 'capacity_exceeded', `worker for task ${this.task.name} is full (${this.live.size}/${this.opts.concurrency} sessions)`,
        { active_sessions: this.live.size, max_sessions: this.opts.concurrency });
    }
    const s = { id, index, sample: this.sample(index, customTask), turns: 0, toolErrors: 0, status: STATUS.running, reward: 0, metrics: {}, lastActive: Date.now() };
    s.finish = (reward, metrics = {}, status = STATUS.completed) => {
      if (s.status !== STATUS.running) return;
      Object.assign(s, { status, reward, metrics: { ...s.metrics, ...metrics } });
    };
    let opening;
    try {
      opening = this.task.setup(s);
    } catch (e) {
      this.log('error', `task ${this.task.name}: setup of sample ${index} failed: ${e.stack}`);
      s.finish(0, { error: `setup: ${e.message}` }, STATUS.taskError);
      opening = [];
    }
    if (s.status === STATUS.running) this.live.set(id, s);
    return { ...this.output(s, opening), tools: this.tools };
  }

  interact({ session_id: id, messages }) {
    const s = this.live.get(id);
    if (!s) throw new HttpError(404, 'unknown_session', `no session ${id} on this worker (never started, finished, cancelled or expired)`);
    s.lastActive = Date.now();
    if (isRenewal(messages)) return { session_id: id, env_out: this.output(s, messages) };
    if (!Array.isArray(messages) || !messages.every((m) => m && typeof m === 'object')) {
      throw new HttpError(422, 'invalid_request', 'messages must be a list of assistant messages');
    }
    const out = this.step(s, messages);
    if (s.status !== STATUS.running) this.live.delete(id);
    return { session_id: id, env_out: this.output(s, out) };
  }

  step(s, messages) {
    const calls = messages.filter((m) => m.role === 'assistant').flatMap((m) => m.tool_calls || []);
    s.turns += 1;
    const out = [];
    try {
      if (!calls.length) {
        const text = messages.filter((m) => m.role === 'assistant').map((m) => textOf(m.content)).join('\n');
        out.push({ role: 'user', content: this.task.onText(s, text) });
      }
      for (const call of calls) {
        out.push({ role: 'tool', tool_call_id: call.id, content: this.call(s, call) });
        if (s.status !== STATUS.running) break;
      }
    } catch (e) {  // the task's own fault: the episode ends "task error", never scored as the model's
      this.log('error', `task ${this.task.name}, session ${s.id}: ${e.stack}`);
      s.finish(0, { error: e.message }, STATUS.taskError);
    }
    if (s.status === STATUS.running && s.turns >= this.task.maxTurns) s.finish(0, {}, STATUS.limit);
    return out;
  }

  call(s, call) {
    const fn = call.function || {};
    try {
      const tool = this.byName.get(fn.name);
      if (!tool) throw new ToolError(`unknown tool \`${fn.name}\`; the tools are ${[...this.byName.keys()].map((n) => `\`${n}\``).join(', ')}`);
      return String(this.task.call(s, fn.name, checkArguments(tool, fn.arguments)));
    } catch (e) {
      if (!(e instanceof ToolError)) throw e;
      s.toolErrors += 1;
      return `Error: ${e.message}`;
    }
  }

  cancel({ session_id: id }) {
    if (!this.live.delete(id)) throw new HttpError(404, 'unknown_session', `no session ${id} on this worker`);
    return { session_id: id };
  }

  expireIdle() {
    const now = Date.now();
    for (const [id, s] of this.live) {
      if (now - s.lastActive > this.opts.idleTimeout * 1000) {
        this.log('info', `session ${id} idle for ${Math.round((now - s.lastActive) / 1000)} s: cancelled`);
        this.live.delete(id);
      }
    }
  }

  reference(query) {
    const index = Number(query.get('index'));
    const messages = this.task.reference ? this.task.reference(this.sample(index)) : null;
    if (!messages) throw new HttpError(404, 'unknown_sample', `no reference for sample ${query.get('index')}`);
    return { index, messages };
  }
}

function send(res, status, body, headers = {}) {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': data.length, ...headers });
  res.end(data);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) reject(new HttpError(413, 'request_too_large', `body over ${MAX_BODY} bytes`));
      else chunks.push(c);
    });
    req.on('end', () => {
      if (!chunks.length) return resolve({});
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch (e) {
        reject(new HttpError(422, 'invalid_request', `request body is not valid JSON: ${e.message}`));
      }
    });
    req.on('error', reject);
  });
}

function postJson(url, body, headers, timeoutMs) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const data = Buffer.from(JSON.stringify(body));
    const req = (u.protocol === 'https:' ? https : http).request(u, {
      method: 'POST', timeout: timeoutMs,
      headers: { 'content-type': 'application/json', 'content-length': data.length, ...headers },
    }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode < 400 ? resolve(res.statusCode) : reject(new Error(`HTTP ${res.statusCode}`))));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(data);
  });
}

/** Run a worker of `task` with the command-line flags `argv`; returns the HTTP server. */
function serve(task, argv) {
  const opts = parseArgs(task, argv);
  const log = (level, msg) => {
    if (LEVELS[level] >= LEVELS[opts.logLevel]) process.stderr.write(`${new Date().toISOString()} ${level.toUpperCase()} worker ${task.name}: ${msg}\n`);
  };
  const sessions = new Sessions(task, opts, log);
  const secret = process.env.AGENTRL_WORKER_SECRET || '';
  const bearer = secret ? { authorization: `Bearer ${secret}` } : {};
  const authorized = (req) => {
    if (!secret) return true;
    const got = Buffer.from(req.headers.authorization || '');
    const want = Buffer.from(bearer.authorization);
    return got.length === want.length && crypto.timingSafeEqual(got, want);
  };
  const health = () => ({ status: 'ok', task: task.name, ...sessions.status() });
  const routes = {
    'POST /api/start_sample': (body) => sessions.start(body),
    'POST /api/interact': (body) => sessions.interact(body),
    'POST /api/cancel': (body) => sessions.cancel(body),
    'POST /api/cancel_all': () => {
      const cancelled = sessions.live.size;
      sessions.live.clear();
      return { cancelled };
    },
    'GET /api/get_sessions': () => Object.fromEntries([...sessions.live].map(([id, s]) => [id, s.index])),
    'GET /api/get_indices': () => sessions.indices,
    'GET /api/worker_status': () => sessions.status(),
    'GET /api/reference': (_, query) => sessions.reference(query),
    'GET /health': health,
    'GET /api/health': health,
  };

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://worker');
    const route = routes[`${req.method} ${url.pathname}`];
    try {
      if (!route) throw new HttpError(404, 'not_found', `no route ${req.method} ${url.pathname}`);
      if (!url.pathname.endsWith('/health') && !authorized(req)) throw new HttpError(401, 'unauthorized', 'a worker secret is required');
      const body = req.method === 'POST' ? await readBody(req) : {};
      const answer = route(body, url.searchParams);
      send(res, 200, answer, url.pathname === '/api/start_sample' ? { session_id: String(body.session_id) } : {});
    } catch (e) {
      if (!(e instanceof HttpError)) log('error', `${req.method} ${url.pathname}: ${e.stack}`);
      const err = e instanceof HttpError ? e : new HttpError(500, 'internal_error', `${e.name}: ${e.message}`);
      send(res, err.status, { detail: err.message, error: err.code, data: err.data });
    }
  });
  // agentrl-envs' controller first offers its multiplexed transport (an HTTP Upgrade): any answer
  // but 101 tells it to speak plain HTTP/1.1, as to AgentRL's own workers.
  server.on('upgrade', (req, socket) => {
    const body = JSON.stringify({ detail: 'no upgrade here: HTTP/1.1 only', error: 'not_found', data: {} });
    socket.end(`HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  // The controller keeps idle connections for 30 s: closing them sooner (Node's default is 5 s)
  // would fail a request it sends on one that is closing.
  server.keepAliveTimeout = 75_000;
  server.headersTimeout = 80_000;

  const expiry = setInterval(() => sessions.expireIdle(), Math.min(10, Math.max(0.05, opts.idleTimeout / 4)) * 1000);
  let beat = null;
  let stopping = false;
  const heartbeat = (registered) => {
    const body = { name: task.name, address: opts.self, concurrency: opts.concurrency, indices: sessions.indices };
    postJson(`${opts.controller}/receive_heartbeat`, body, bearer, 5000).then(
      () => true,
      (e) => {
        if (registered) log('warning', `heartbeat to ${opts.controller} failed: ${e.message}`);
        return false;
      },
    ).then((ok) => {
      if (!stopping) beat = setTimeout(() => heartbeat(ok), ok ? opts.heartbeatInterval * 1000 : 250);
    });
  };
  const stop = () => {
    stopping = true;
    clearTimeout(beat);
    clearInterval(expiry);
    sessions.live.clear();
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  server.listen(opts.port, opts.host, () => {
    process.stdout.write(`worker ${task.name} (${sessions.samples.length} samples) at ${opts.self}\n`);
    if (opts.controller) heartbeat(false);
  });
  return server;
}

module.exports = { ToolError, serve, STATUS };
