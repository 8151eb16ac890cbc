'use strict';
// Starting the server process ourselves, so that a failure names its real cause: the command is
// missing, is not executable, or started and then exited (with its code and last error line).
// No `vscode` import: the tests run this module with plain Node.

const cp = require('node:child_process');

/** A server that could not start or stopped; `message` is for the user as it stands. */
class ServerError extends Error {}

/** Why `spawn` failed, in the user's terms. */
function spawnFailure(command, error) {
  const where = command.includes('/') ? '' : ' on PATH';
  const fix = 'Install the server (see the README) or set "cpcLsp.server.command" to its full path.';
  if (error && error.code === 'ENOENT') {
    return `cpc-lsp: the server command "${command}" was not found${where}. ${fix}`;
  }
  if (error && error.code === 'EACCES') {
    return `cpc-lsp: the server command "${command}" is not executable (permission denied). ${fix}`;
  }
  const detail = error instanceof Error ? error.message : String(error);
  return `cpc-lsp: could not start the server command "${command}": ${detail}`;
}

/**
 * Starts `command args` with pipes for stdio; resolves once it runs, rejects with a ServerError
 * that names the command when it cannot start.
 *
 * @returns {Promise<ServerProcess>}
 */
function spawnServer(command, args) {
  return new Promise((resolve, reject) => {
    let child;
    try {
      child = cp.spawn(command, args, { stdio: 'pipe', windowsHide: true });
    } catch (error) {
      reject(new ServerError(spawnFailure(command, error)));
      return;
    }
    child.once('error', (error) => reject(new ServerError(spawnFailure(command, error))));
    child.once('spawn', () => resolve(new ServerProcess(command, child)));
  });
}

/** A running server process: how it ended, and a way to make sure it has. */
class ServerProcess {
  constructor(command, child) {
    this.command = command;
    this.child = child;
    /** @type {{ code: number | null, signal: string | null } | undefined} */
    this.exit = undefined;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    /** @type {{ lastError(): string } | undefined} set by the stderr reader */
    this.stderr = undefined;
  }

  /** Waits up to `ms` for the process to end; true if it has. */
  async ended(ms) {
    if (this.exit) {
      return true;
    }
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    const result = await Promise.race([this.exited.then(() => true), timeout]);
    clearTimeout(timer);
    return result;
  }

  /** "exited with code 2<when>: <its last error line>" and the like. */
  describe(when = '') {
    let how = 'stopped';
    if (this.exit && this.exit.signal) {
      how = `was killed by ${this.exit.signal}`;
    } else if (this.exit) {
      how = `exited with code ${this.exit.code}`;
    }
    const last = this.stderr ? this.stderr.lastError() : '';
    return `${how}${when}${last ? `: ${last}` : ''}`;
  }

  /** Ends the process if the polite shutdown did not. */
  async kill(graceMs = 2000) {
    if (await this.ended(graceMs)) {
      return;
    }
    this.child.kill('SIGTERM');
    if (!(await this.ended(graceMs))) {
      this.child.kill('SIGKILL');
    }
  }
}

module.exports = { ServerError, ServerProcess, spawnFailure, spawnServer };
