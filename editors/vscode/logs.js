'use strict';
// The server's stderr, line by line, at the server's own log levels.
//
// vscode-languageclient writes every stderr line with `outputChannel.error()`, so an INFO line
// would show as [error]. The server logs `<date> <time> LEVEL logger: message` (lsp_server
// __main__), so each line is routed to the matching level of the log output channel; lines
// without a level (a traceback's body, llama.cpp's own output) keep the level of the line before;
// a traceback's first line and argparse's complaint are errors.
// No `vscode` import: the tests run this module with plain Node.

const LEVELS = {
  DEBUG: 'debug',
  INFO: 'info',
  WARNING: 'warn',
  ERROR: 'error',
  CRITICAL: 'error',
};

// argparse's last words before exit code 2: `cpc-lsp: error: unrecognized arguments: …`
const ARGPARSE_ERROR = /^[\w.-]+: error: /;
const LINE = /^(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)? )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$/;

/**
 * Reads stderr lines, remembering the level of the last one and the last error lines (to name the
 * cause when the server dies).
 */
class StderrLevels {
  constructor(recent = 5) {
    this.level = 'info';
    this.recent = recent; // an error line older than this many lines says nothing about an exit
    this.count = 0;
    /** @type {{ n: number, text: string } | undefined} */
    this.error = undefined;
    this.last = '';
    this.lastWasPlain = false;
  }

  /** `{ level, text }` for one line: the channel method to call and the text without the date. */
  line(raw) {
    const match = LINE.exec(raw);
    let text = raw;
    if (match) {
      this.level = LEVELS[match[1]];
      text = match[2];
    } else if (raw.startsWith('Traceback (most recent call last)') || ARGPARSE_ERROR.test(raw)) {
      this.level = 'error';
    }
    if (text.trim() !== '') {
      this.count += 1;
      this.last = text.trim();
      this.lastWasPlain = !match;
      if (this.level === 'error') {
        this.error = { n: this.count, text: this.last };
      }
    }
    return { level: this.level, text };
  }

  /** The line most likely to say why the server stopped: a recent error line (a traceback's
   * last), else the last line if it had no level (argparse's complaint); '' if none. */
  lastError() {
    if (this.error && this.error.n > this.count - this.recent) {
      return this.error.text;
    }
    return this.lastWasPlain ? this.last : '';
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
