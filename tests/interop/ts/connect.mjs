// Connecting the TypeScript SDK v2 client to aml-mcp. The lines between the docs markers are the
// snippet in docs/connecting-clients.md, "Connect a client" (a test checks that they match).
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from "@modelcontextprotocol/client";

export const TASKS = "io.modelcontextprotocol/tasks";

async function open(url, authProvider) {
  // docs:typescript
  const client = new Client({ name: "aml-assistant", version: "1.0.0" }, {
    capabilities: { elicitation: {}, extensions: { "io.modelcontextprotocol/tasks": {} } },
    versionNegotiation: { mode: "auto" }, // speak 2026-07-28, not the initialize handshake
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider }));
  // docs:end
  return client;
}

/** Connects; on the first 401 the provider has sent the user to log in, so finish and reconnect. */
export async function connect(url, authProvider) {
  try {
    return await open(url, authProvider);
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
    await transport.finishAuth(await authProvider.callbackParams()); // code, state and iss
    return await open(url, authProvider);
  }
}
