"use strict";
// browser-login: a client for the browser-login broker's JSON-RPC API
// (docs/rpc.md), for Electron main processes and Node tools.

const { Broker, HttpResponse, defaultSocketPath } = require("./lib/broker");
const errors = require("./lib/errors");

const { errorFromReply, ...exported } = errors;

module.exports = { Broker, HttpResponse, defaultSocketPath, ...exported };
