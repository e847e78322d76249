#!/usr/bin/env node
'use strict';
// The node_sum worker: node worker.js --controller http://CONTROLLER:5020/api [--port 5021] ...
// (flags and endpoints: protocol.js; HOST and PORT in the environment set the listen address).

const { serve } = require('./protocol.js');

try {
  serve(require('./task.js'), process.argv.slice(2));
} catch (e) {
  process.stderr.write(`worker: error: ${e.message}\n`);
  process.exit(2);
}
