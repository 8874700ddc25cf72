#!/usr/bin/env node
// The TypeScript SDK v2 client left at its default (versionNegotiation 'legacy': the initialize
// handshake) against aml-mcp: prints the error the user sees, as JSON, and exits 0 if connect
// failed (what is expected), 1 if it unexpectedly connected.
//
//   node legacy-probe.mjs URL TOKEN
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [url, token] = process.argv.slice(2);
const client = new Client({ name: "aml-assistant", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { authorization: `Bearer ${token}` } },
});
try {
  await client.connect(transport);
  process.stdout.write(`${JSON.stringify({ connected: true })}\n`);
  process.exit(1);
} catch (error) {
  process.stdout.write(`${JSON.stringify({ connected: false, message: String(error?.message ?? error) })}\n`);
  process.exit(0);
}
