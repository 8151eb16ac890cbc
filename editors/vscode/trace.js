'use strict';
// The channel vscode-languageclient traces LSP messages to, switched by `cpcLsp.trace.server`.
//
// vscode-languageclient 11 traces only while its trace channel's log level is Trace, and reads
// the setting just to choose "messages" or "verbose". A log channel's level belongs to the user
// (Developer: Set Log Level), so this wrapper reports Trace whenever the setting is on, and writes
// the trace into the cpc-lsp log channel at a level that channel shows.

const vscode = require('vscode');

class TraceChannel {
  /**
   * @param {vscode.LogOutputChannel} output  the cpc-lsp log channel
   * @param {() => string} setting  the current `cpcLsp.trace.server`: off | messages | verbose
   */
  constructor(output, setting) {
    this.output = output;
    this.setting = setting;
    this.emitter = new vscode.EventEmitter();
    this.onDidChangeLogLevel = this.emitter.event;
    this.forward = output.onDidChangeLogLevel(() => this.changed());
  }

  get name() {
    return this.output.name;
  }

  get logLevel() {
    const on = this.setting() !== 'off' || this.output.logLevel === vscode.LogLevel.Trace;
    return on ? vscode.LogLevel.Trace : this.output.logLevel;
  }

  /** Call when `cpcLsp.trace.server` changes: the client then sends `$/setTrace`. */
  changed() {
    this.emitter.fire(this.logLevel);
  }

  trace(message, ...args) {
    if (this.output.logLevel === vscode.LogLevel.Trace) {
      this.output.trace(message, ...args);
    } else {
      this.output.info(message, ...args);
    }
  }

  debug(message, ...args) {
    this.output.debug(message, ...args);
  }

  info(message, ...args) {
    this.output.info(message, ...args);
  }

  warn(message, ...args) {
    this.output.warn(message, ...args);
  }

  error(message, ...args) {
    this.output.error(message, ...args);
  }

  append(value) {
    this.output.append(value);
  }

  appendLine(value) {
    this.output.appendLine(value);
  }

  replace(value) {
    this.output.replace(value);
  }

  clear() {
    this.output.clear();
  }

  show(...args) {
    this.output.show(...args);
  }

  hide() {
    this.output.hide();
  }

  dispose() {
    this.forward.dispose();
    this.emitter.dispose();
  }
}

module.exports = { TraceChannel };
