'use strict';
// The status bar item: what the server is doing (starting, loading the model, ready, error, or a
// model server that is unreachable or too slow: lsp_server/status.py) and
// whether suggestions are on for the language of the active editor. Clicking it runs
// `cpcLsp.toggle`, which turns them off or on for that language.

const vscode = require('vscode');
const settings = require('./settings');

const ICONS = {
  starting: '$(loading~spin)',
  loading: '$(loading~spin)',
  ready: '$(sparkle)',
  off: '$(circle-slash)',
  error: '$(error)',
  unreachable: '$(debug-disconnect)',
  slow: '$(watch)',
  stopped: '$(debug-stop)',
};

const SAY = {
  starting: 'starting the server',
  loading: 'loading the model',
  ready: 'ready',
  error: 'error',
  unreachable: 'server unreachable',
  slow: 'server too slow',
  stopped: 'stopped',
};

// States that need the user's attention: shown even where suggestions are off, in warning colours.
const TROUBLE = { error: 'statusBarItem.errorBackground', unreachable: 'statusBarItem.warningBackground', slow: 'statusBarItem.warningBackground' };

class StatusBar {
  constructor() {
    this.item = vscode.window.createStatusBarItem('cpcLsp.status', vscode.StatusBarAlignment.Right, 100);
    this.item.name = 'cpc-lsp';
    this.item.command = 'cpcLsp.toggle';
    /** @type {keyof SAY} */
    this.state = 'starting';
    this.message = '';
    this.render();
    this.item.show();
  }

  /** The server's state (`cpcLsp/status`) or the client's (starting, stopped, error). */
  set(state, message = '') {
    this.state = state in SAY ? state : 'error';
    this.message = message;
    this.render();
  }

  /** Re-read `cpcLsp.enable` and the active editor's language. */
  render() {
    const editor = vscode.window.activeTextEditor;
    const language = editor ? editor.document.languageId : undefined;
    const enable = vscode.workspace.getConfiguration(settings.SECTION).get('enable');
    const on = settings.enabledFor(enable, language);
    const where = language ? ` for ${language}` : '';
    const shown = on || this.state in TROUBLE ? this.state : 'off';
    this.item.text = `${ICONS[shown]} cpc-lsp`;
    const summary = `cpc-lsp: ${SAY[this.state]}${this.message ? ` (${this.message})` : ''}`;
    const toggle = on ? `Suggestions are on${where}; click to turn them off.` : `Suggestions are off${where}; click to turn them on.`;
    const tooltip = new vscode.MarkdownString(
      `${escape(summary)}\n\n${toggle}\n\n[Show Server Log](command:cpcLsp.showLog) · [Restart Server](command:cpcLsp.restart)`,
    );
    tooltip.isTrusted = { enabledCommands: ['cpcLsp.showLog', 'cpcLsp.restart'] };
    this.item.tooltip = tooltip;
    // Read by screen readers, and by the tests: state, then on/off.
    this.item.accessibilityInformation = { label: `cpc-lsp: ${SAY[this.state]}, ${on ? 'on' : 'off'}${where}` };
    this.item.backgroundColor = this.state in TROUBLE ? new vscode.ThemeColor(TROUBLE[this.state]) : undefined;
  }

  dispose() {
    this.item.dispose();
  }
}

function escape(text) {
  return text.replace(/[\\`*_{}[\]()#+\-.!<>|]/g, '\\$&');
}

module.exports = { StatusBar };
