// Connect the TypeScript SDK v2 client to aml-mcp (the README's snippet is this file).
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from "@modelcontextprotocol/client";

export const TASKS = "io.modelcontextprotocol/tasks";

export async function connect(url, authProvider) {
  const newClient = () =>
    new Client(
      { name: "aml-assistant", version: "1.0.0" },
      {
        capabilities: { elicitation: {}, extensions: { [TASKS]: {} } },
        versionNegotiation: { mode: "auto" }, // speak 2026-07-28 (no initialize handshake)
      },
    );
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
  try {
    const client = newClient();
    await client.connect(transport);
    return client;
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    // The 401 sent the user to log in (authProvider.redirectToAuthorization); finish with the
    // callback's parameters (code, state, iss).
    await transport.finishAuth(await authProvider.callbackParams());
    const client = newClient();
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider }));
    return client;
  }
}
