#!/usr/bin/env node
'use strict';
// `sandtrap-mcp`: the MCP server, `sandtrap mcp ...` (docs/cli.md).
require('./sandtrap.js').main(['mcp', ...process.argv.slice(2)]);
