'use strict';
// The server's stderr, line by line, at the server's own log levels.
//
// vscode-languageclient writes every stderr line with `outputChannel.error()`, so an INFO line
// would show as [error]. The server logs `<date> <time> LEVEL logger: message` (lsp_server
// __main__), so each line is routed to the matching level of the log output channel; lines
// without a level (a traceback's body, llama.cpp's own output) keep the level of the line before.
// No `vscode` import: the tests run this module with plain Node.

const LEVELS = {
  DEBUG: 'debug',
  INFO: 'info',
  WARNING: 'warn',
  ERROR: 'error',
  CRITICAL: 'error',
};

const LINE = /^(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)? )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$/;

/**
 * Reads stderr lines, remembering the level of the last one and the last error lines (to name the
 * cause when the server dies).
 */
class StderrLevels {
  constructor(keep = 5) {
    this.level = 'info';
    this.keep = keep;
    /** @type {string[]} */
    this.errors = [];
    this.last = '';
  }

  /** `{ level, text }` for one line: the channel method to call and the text without the date. */
  line(raw) {
    const match = LINE.exec(raw);
    let text = raw;
    if (match) {
      this.level = LEVELS[match[1]];
      text = match[2];
    } else if (raw.startsWith('Traceback (most recent call last)')) {
      this.level = 'error';
    }
    if (text.trim() !== '') {
      this.last = text.trim();
      if (this.level === 'error') {
        this.errors.push(this.last);
        this.errors.splice(0, this.errors.length - this.keep);
      }
    }
    return { level: this.level, text };
  }

  /** The line most likely to say why the server stopped: the last error line, else the last
   * line (argparse's complaint has no level); '' if none. */
  lastError() {
    return this.errors.length ? this.errors[this.errors.length - 1] : this.last;
  }
}

/**
 * A `stdioOptions.stderr` handler for vscode-languageclient: routes each line to its level.
 *
 * @param {(levels: StderrLevels) => void} onStart  called with the reader of this process
 */
function stderrHandler(onStart) {
  const readline = require('node:readline');
  return (input, channel) => {
    const levels = new StderrLevels();
    onStart(levels);
    readline
      .createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 })
      .on('line', (raw) => {
        const { level, text } = levels.line(raw);
        channel[level](text);
      });
  };
}

module.exports = { StderrLevels, stderrHandler };
