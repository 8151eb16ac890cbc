'use strict';
// A thin client: start `cpc-lsp`, forward the `cpcLsp.*` settings, and let vscode-languageclient
// turn the server's `textDocument/inlineCompletion` into ghost text. VS Code asks for a suggestion
// as you type and cancels the superseded request (`$/cancelRequest`) itself.

const vscode = require('vscode');
const { LanguageClient, DidChangeConfigurationNotification } = require('vscode-languageclient/node');
const settings = require('./settings');

/** @type {LanguageClient | undefined} */
let client;
/** @type {vscode.OutputChannel | undefined} */
let output;
// Starts, stops and restarts run one after another, never interleaved.
let pending = Promise.resolve();

function configGetter() {
  const config = vscode.workspace.getConfiguration(settings.SECTION);
  return (key) => config.get(key);
}

function createClient() {
  const executable = settings.serverExecutable(configGetter());
  /** @type {import('vscode-languageclient/node').ServerOptions} */
  const serverOptions = { command: executable.command, args: executable.args };
  /** @type {import('vscode-languageclient/node').LanguageClientOptions} */
  const clientOptions = {
    // Every text document, whatever its language: prose and code alike.
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    // A function, so that a restart after a crash sends the settings of that moment.
    initializationOptions: () =>
      settings.initializationOptions(settings.serverSettings(configGetter())),
    outputChannel: output,
  };
  return new LanguageClient(settings.SECTION, 'cpc-lsp', serverOptions, clientOptions);
}

async function startClient() {
  const next = createClient();
  client = next;
  try {
    await next.start();
  } catch (error) {
    const { command } = settings.serverExecutable(configGetter());
    const message = error instanceof Error ? error.message : String(error);
    const choice = await vscode.window.showErrorMessage(
      `cpc-lsp: could not start the server "${command}": ${message}. ` +
        'Install it (pip install cpc-lsp) or set "cpcLsp.server.command" to its full path.',
      'Open Settings',
      'Show Log',
    );
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'cpcLsp.server');
    } else if (choice === 'Show Log') {
      output?.show();
    }
  }
}

async function stopClient() {
  const current = client;
  client = undefined;
  if (current) {
    try {
      await current.stop();
    } catch {
      // The process may already be gone; nothing left to stop.
    }
  }
}

function enqueue(task) {
  pending = pending.then(task, task);
  return pending;
}

function restart() {
  return enqueue(async () => {
    await stopClient();
    await startClient();
  });
}

function sendSettings() {
  if (!client || !client.isRunning()) {
    return; // initializationOptions carries them when it starts
  }
  const params = settings.didChangeConfigurationParams(settings.serverSettings(configGetter()));
  client.sendNotification(DidChangeConfigurationNotification.type, params).catch((error) => {
    output?.appendLine(`cpc-lsp: could not send settings: ${error}`);
  });
}

/** @param {vscode.ExtensionContext} context */
function activate(context) {
  output = vscode.window.createOutputChannel('cpc-lsp');
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand('cpcLsp.restart', restart),
    vscode.commands.registerCommand('cpcLsp.showLog', () => output?.show()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(`${settings.SECTION}.server`)) {
        restart();
        return;
      }
      const affected = settings
        .serverSettingKeys()
        .some((key) => event.affectsConfiguration(`${settings.SECTION}.${key}`));
      if (affected) {
        sendSettings();
      }
    }),
  );
  return enqueue(startClient);
}

function deactivate() {
  return enqueue(stopClient);
}

module.exports = { activate, deactivate };
