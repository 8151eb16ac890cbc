'use strict';
// Runs extension.js's activate() with stand-ins for `vscode` and for vscode-languageclient's
// LanguageClient, and records what the extension does: how it starts the server, what it sends
// as initializationOptions, what a settings change sends, which changes restart the server.
// The notification type is the real one from vscode-languageserver-protocol.
//
// Output (JSON on stdout) is judged by tests/editors/test_vscode.py.

const Module = require('node:module');
const path = require('node:path');
const protocol = require('vscode-languageserver-protocol');

const manifest = require('../package.json');
const PROPERTIES = manifest.contributes.configuration.properties;

// --- the user's settings, as VS Code's WorkspaceConfiguration would give them ----------------

const userSettings = {
  'server.command': '/opt/venv/bin/cpc-lsp',
  'server.args': ['--log-level', 'debug'],
  maxTokens: 4,
  stop: ['\n\n'],
};

function getConfiguration(section) {
  return {
    get(key) {
      if (Object.prototype.hasOwnProperty.call(userSettings, key)) {
        return userSettings[key];
      }
      const property = PROPERTIES[`${section}.${key}`];
      return property ? JSON.parse(JSON.stringify(property.default)) : undefined;
    },
  };
}

// --- recording stand-ins ------------------------------------------------------------------

const report = { clients: [], commands: [], notifications: [], errors: [] };
const configurationListeners = [];

class FakeLanguageClient {
  constructor(id, name, serverOptions, clientOptions) {
    this.record = {
      id,
      name,
      serverOptions,
      documentSelector: clientOptions.documentSelector,
      initializationOptions:
        typeof clientOptions.initializationOptions === 'function'
          ? clientOptions.initializationOptions()
          : clientOptions.initializationOptions,
      outputChannel: clientOptions.outputChannel ? clientOptions.outputChannel.name : null,
      started: false,
      stopped: false,
    };
    this.clientOptions = clientOptions;
    this.running = false;
    report.clients.push(this.record);
  }
  async start() {
    this.record.started = true;
    this.running = true;
  }
  async stop() {
    this.record.stopped = true;
    this.running = false;
  }
  isRunning() {
    return this.running;
  }
  async sendNotification(type, params) {
    report.notifications.push({ method: type.method, params });
  }
}

const vscode = {
  window: {
    createOutputChannel: (name) => ({ name, show() {}, appendLine() {}, dispose() {} }),
    showErrorMessage: async (message) => {
      report.errors.push(message);
      return undefined;
    },
  },
  workspace: {
    getConfiguration,
    onDidChangeConfiguration: (listener) => {
      configurationListeners.push(listener);
      return { dispose() {} };
    },
  },
  commands: {
    registerCommand: (command, callback) => {
      report.commands.push(command);
      return { dispose() {}, callback };
    },
    executeCommand: async () => undefined,
  },
};

const stubs = {
  vscode,
  'vscode-languageclient/node': {
    LanguageClient: FakeLanguageClient,
    DidChangeConfigurationNotification: protocol.DidChangeConfigurationNotification,
  },
};
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  return Object.prototype.hasOwnProperty.call(stubs, request) ? `stub:${request}` : resolve.call(this, request, ...rest);
};
for (const [name, exports] of Object.entries(stubs)) {
  const module = new Module(`stub:${name}`);
  module.exports = exports;
  module.loaded = true;
  require.cache[`stub:${name}`] = module;
}

/** A settings change, as VS Code reports it: which full keys changed. */
async function changeSettings(changed) {
  const event = {
    affectsConfiguration: (section) =>
      changed.some((key) => key === section || key.startsWith(`${section}.`)),
  };
  for (const listener of configurationListeners) {
    listener(event);
  }
  await new Promise((resolve) => setTimeout(resolve, 50)); // let a restart run
}

async function main() {
  const extension = require(path.join(__dirname, '..', 'extension.js'));
  const context = { subscriptions: [] };
  await extension.activate(context);
  report.subscriptions = context.subscriptions.length;

  report.afterActivate = { clients: report.clients.length, notifications: report.notifications.length };

  userSettings.maxTokens = 8;
  await changeSettings(['cpcLsp.maxTokens']);
  report.afterServerSetting = { clients: report.clients.length, notifications: report.notifications.length };

  await changeSettings(['cpcLsp.trace.server', 'editor.fontSize']);
  report.afterOtherSettings = { clients: report.clients.length, notifications: report.notifications.length };

  userSettings['server.args'] = [];
  await changeSettings(['cpcLsp.server.args']);
  report.afterServerArgs = { clients: report.clients.length, notifications: report.notifications.length };

  await extension.deactivate();
  process.stdout.write(JSON.stringify(report));
}

main().catch((error) => {
  process.stderr.write(`activate.js: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
