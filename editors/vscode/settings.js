'use strict';
// What the extension sends the server, built from the user's `cpcLsp.*` settings.
//
// The manifest (package.json `contributes.configuration`) is the one list of settings: their
// names, types, defaults and descriptions. This module reads it and never imports `vscode`, so the
// tests start the real server with exactly the options the extension would send.

const os = require('node:os');
const path = require('node:path');
const manifest = require('./package.json');

const SECTION = 'cpcLsp';

// The client's own settings: how to start the server, tracing, where to suggest. They are written
// by hand in the manifest and never forwarded to the server; every other `cpcLsp.*` setting is the
// server's (lsp_server/settings.py) and is sent to it.
const CLIENT_SETTINGS = ['server.command', 'server.args', 'trace.server', 'enable'];

const PROPERTIES = manifest.contributes.configuration.properties;

function clone(value) {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

/** The manifest's default for `cpcLsp.<key>`. */
function defaultOf(key) {
  const property = PROPERTIES[`${SECTION}.${key}`];
  if (!property) {
    throw new Error(`unknown setting ${SECTION}.${key}`);
  }
  return clone(property.default);
}

/** Keys (without the `cpcLsp.` prefix) of the settings the server reads, in manifest order. */
function serverSettingKeys() {
  return Object.keys(PROPERTIES)
    .filter((name) => name.startsWith(`${SECTION}.`))
    .map((name) => name.slice(SECTION.length + 1))
    .filter((key) => !CLIENT_SETTINGS.includes(key));
}

/**
 * The server's settings as one JSON object.
 *
 * @param {(key: string) => unknown} get  the user's value for `cpcLsp.<key>`, or undefined
 *   (VS Code's `WorkspaceConfiguration.get` already falls back to the manifest default).
 */
function serverSettings(get) {
  const settings = {};
  for (const key of serverSettingKeys()) {
    const value = get(key);
    settings[key] = value === undefined || value === null ? defaultOf(key) : clone(value);
  }
  // No model path: null asks for the server's default model, which is the one given with
  // `--model` in `cpcLsp.server.args` if any, else the packaged one.
  if (typeof settings.model === 'string' && settings.model.trim() === '') {
    settings.model = null;
  }
  return settings;
}

/** `initializationOptions` for the `initialize` request. */
function initializationOptions(settings) {
  return { [SECTION]: settings };
}

/** Params of the `workspace/didChangeConfiguration` notification sent when a setting changes. */
function didChangeConfigurationParams(settings) {
  return { settings: { [SECTION]: settings } };
}

/**
 * How to start the server: `{ command, args }`, spoken to over stdio.
 *
 * @param {(key: string) => unknown} get  as for `serverSettings`
 */
function serverExecutable(get) {
  let command = get('server.command');
  if (typeof command !== 'string' || command.trim() === '') {
    command = defaultOf('server.command');
  }
  let args = get('server.args');
  if (!Array.isArray(args)) {
    args = defaultOf('server.args');
  }
  command = command.trim();
  if (command === '~' || command.startsWith('~/')) {
    command = path.join(os.homedir(), command.slice(1)); // spawn does not expand `~`
  }
  return { command, args: args.map(String) };
}

/**
 * Whether suggestions are on for a language, from `cpcLsp.enable`: `{ "*": true, "plaintext":
 * false }` maps language ids to on or off, and `"*"` is every other language (on when absent).
 *
 * @param {unknown} enable  the setting's value
 * @param {string | undefined} languageId  undefined: the `"*"` entry
 */
function enabledFor(enable, languageId) {
  if (typeof enable === 'boolean') {
    return enable;
  }
  if (enable === null || typeof enable !== 'object' || Array.isArray(enable)) {
    return true;
  }
  const own = (key) => Object.prototype.hasOwnProperty.call(enable, key);
  if (languageId !== undefined && own(languageId)) {
    return Boolean(enable[languageId]);
  }
  return own('*') ? Boolean(enable['*']) : true;
}

/**
 * `cpcLsp.enable` with one language switched: the key to write and the new map. The key is the
 * language id, or `"*"` when there is no language (no editor open).
 */
function toggled(enable, languageId) {
  const map = enable !== null && typeof enable === 'object' && !Array.isArray(enable) ? { ...enable } : {};
  if (typeof enable === 'boolean') {
    map['*'] = enable;
  }
  const key = languageId ?? '*';
  map[key] = !enabledFor(enable, languageId);
  return map;
}

module.exports = {
  SECTION,
  CLIENT_SETTINGS,
  enabledFor,
  toggled,
  defaultOf,
  serverSettingKeys,
  serverSettings,
  initializationOptions,
  didChangeConfigurationParams,
  serverExecutable,
};
