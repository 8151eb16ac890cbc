'use strict';
// Starts the real server the way the extension does and types into a document the way VS Code
// does: incremental `didChange` per keystroke, an automatic `textDocument/inlineCompletion` after
// each one, and `$/cancelRequest` for the request it supersedes. Positions are UTF-16.
//
// Input (JSON on stdin):
//   { "config": { "server.command": ..., "server.args": [...], "<setting>": ... },
//     "cases": [ { "name": ..., "before": "text already in the document", "typed": " yest",
//                  "uri": optional, default file:///cpc-lsp-test/case-N.txt } ],
//     "timeoutMs": 180000, "keystrokeMs": 40 }
// `config` plays the part of the user's `cpcLsp.*` settings.
// Output (JSON on stdout): what the server answered; tests/editors/test_vscode.py judges it.

const path = require('node:path');
const { spawn } = require('node:child_process');
const {
  createProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
  CancellationTokenSource,
  ResponseError,
} = require('vscode-languageserver-protocol/node');
const settings = require('../settings');

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on('data', (chunk) => chunks.push(chunk));
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    process.stdin.on('error', reject);
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** LSP position of the end of `text`, in UTF-16 code units (a JS string's own units). */
function endPosition(text) {
  const lines = text.split('\n');
  return { line: lines.length - 1, character: lines[lines.length - 1].length };
}

/** Where the JSON-RPC library is loaded from, for this script and for vscode-languageclient. */
function libraries() {
  const clientMain = require.resolve('vscode-languageclient/node');
  const fromClient = require.resolve('vscode-languageserver-protocol', {
    paths: [path.dirname(clientMain)],
  });
  const fromTest = require.resolve('vscode-languageserver-protocol');
  return { protocolFromClient: fromClient, protocolFromTest: fromTest };
}

// What vscode-languageclient announces, trimmed to what this server can use.
const CLIENT_CAPABILITIES = {
  general: { positionEncodings: ['utf-16'] },
  workspace: {
    configuration: true,
    didChangeConfiguration: { dynamicRegistration: true },
    workspaceFolders: true,
  },
  textDocument: {
    synchronization: { dynamicRegistration: true, didSave: true, willSave: true },
    completion: {
      dynamicRegistration: true,
      contextSupport: true,
      completionItem: { snippetSupport: true, insertReplaceSupport: true },
    },
    inlineCompletion: { dynamicRegistration: true },
  },
  window: { workDoneProgress: true, showMessage: {} },
};

function outcomeOf(promise) {
  return promise.then(
    (result) => ({ kind: 'result', result }),
    (error) =>
      error instanceof ResponseError
        ? { kind: 'error', code: error.code, message: error.message }
        : { kind: 'failure', message: String(error && error.stack ? error.stack : error) },
  );
}

async function typeCase(connection, testCase, index, keystrokeMs) {
  const uri = testCase.uri || `file:///cpc-lsp-test/case-${index}.txt`;
  let text = testCase.before;
  let version = 1;
  connection.sendNotification('textDocument/didOpen', {
    textDocument: { uri, languageId: 'plaintext', version, text },
  });

  const requests = [];
  let inFlight; // { source, outcome }
  for (const character of Array.from(testCase.typed)) {
    const at = endPosition(text);
    text += character;
    version += 1;
    connection.sendNotification('textDocument/didChange', {
      textDocument: { uri, version },
      contentChanges: [{ range: { start: at, end: at }, rangeLength: 0, text: character }],
    });
    if (inFlight) {
      inFlight.source.cancel(); // VS Code cancels the suggestion for the previous keystroke
    }
    const source = new CancellationTokenSource();
    const position = endPosition(text);
    const params = {
      textDocument: { uri },
      position,
      context: { triggerKind: 2 /* Automatic */ },
    };
    const outcome = outcomeOf(
      connection.sendRequest('textDocument/inlineCompletion', params, source.token),
    );
    inFlight = { source, outcome };
    requests.push({ position, outcome });
    await sleep(keystrokeMs);
  }

  const answered = [];
  for (const request of requests) {
    answered.push({ position: request.position, ...(await request.outcome) });
  }
  connection.sendNotification('textDocument/didClose', { textDocument: { uri } });
  return {
    name: testCase.name,
    text,
    cursor: endPosition(text),
    requests: answered,
    final: answered[answered.length - 1],
  };
}

async function main() {
  const input = JSON.parse(await readStdin());
  const config = input.config || {};
  const get = (key) => config[key];
  const executable = settings.serverExecutable(get);
  const serverSettings = settings.serverSettings(get);

  const report = {
    executable,
    initializationOptions: settings.initializationOptions(serverSettings),
    libraries: libraries(),
    messages: [],
    configurationRequests: [],
    cases: [],
  };

  const child = spawn(executable.command, executable.args, { stdio: ['pipe', 'pipe', 'inherit'] });
  let finished = false;
  const finish = (status) => {
    if (finished) return;
    finished = true;
    child.kill('SIGKILL');
    process.stdout.write(JSON.stringify(report), () => process.exit(status));
  };
  const timeout = setTimeout(() => {
    report.error = `timed out after ${input.timeoutMs} ms`;
    finish(2);
  }, input.timeoutMs || 180000);

  let shuttingDown = false;
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      resolve({ code, signal });
      if (!shuttingDown) {
        // Pending requests would never be answered: say so now rather than at the timeout.
        report.error = `the server exited early (code ${code}, signal ${signal})`;
        finish(3);
      }
    });
  });
  const spawnError = new Promise((_, reject) => child.on('error', reject));

  const connection = createProtocolConnection(
    new StreamMessageReader(child.stdout),
    new StreamMessageWriter(child.stdin),
  );
  connection.onNotification('window/logMessage', (params) => report.messages.push(params));
  connection.onNotification('window/showMessage', (params) => report.messages.push(params));
  connection.onRequest('window/showMessageRequest', (params) => {
    report.messages.push(params);
    return null;
  });
  connection.onRequest('workspace/configuration', (params) => {
    report.configurationRequests.push(params);
    return params.items.map((item) =>
      item.section === settings.SECTION ? serverSettings : null,
    );
  });
  connection.onRequest('client/registerCapability', () => null);
  connection.onRequest('client/unregisterCapability', () => null);
  connection.onRequest('window/workDoneProgress/create', () => null);
  connection.onNotification(() => {}); // $/progress, telemetry and the like
  connection.listen();

  report.initialize = await Promise.race([
    connection.sendRequest('initialize', {
      processId: process.pid,
      clientInfo: { name: 'Visual Studio Code (cpc-lsp test)', version: '1.91.0' },
      locale: 'en',
      rootUri: null,
      workspaceFolders: null,
      capabilities: CLIENT_CAPABILITIES,
      initializationOptions: report.initializationOptions,
    }),
    spawnError,
  ]);
  connection.sendNotification('initialized', {});
  // What the extension sends when a setting changes: the same settings, now as a patch.
  connection.sendNotification(
    'workspace/didChangeConfiguration',
    settings.didChangeConfigurationParams(serverSettings),
  );

  for (const [index, testCase] of input.cases.entries()) {
    report.cases.push(await typeCase(connection, testCase, index, input.keystrokeMs ?? 40));
  }

  shuttingDown = true;
  await connection.sendRequest('shutdown');
  connection.sendNotification('exit');
  report.exit = await Promise.race([exited, sleep(10000).then(() => ({ code: 'still running' }))]);
  clearTimeout(timeout);
  connection.dispose();
  finish(0);
}

main().catch((error) => {
  process.stderr.write(`inline_completion.js: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
