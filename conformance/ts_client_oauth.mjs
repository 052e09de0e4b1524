// The official TypeScript SDK v2 client through the MCP authorization flow against our server:
// no token at first, so the server answers 401 with a resource_metadata challenge; the client
// follows it (Protected Resource Metadata -> authorization server metadata), gets a token with
// the client_credentials grant (ClientCredentialsProvider), calls a tool, then cancels a long
// call with an AbortController.
//
// Usage: node ts_client_oauth.mjs <mcp url> <issuer> [legacy|2026-07-28]
// (run by tests/auth/test_oauth_ts_client.py)
// Prints one JSON object: what happened, for the test to assert on.
import {
  Client,
  ClientCredentialsProvider,
  StreamableHTTPClientTransport,
} from "@modelcontextprotocol/client";

const [url, issuer, era = "legacy"] = process.argv.slice(2);
const report = { errors: [], statuses: [] };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Record every status the MCP endpoint answers (the first must be the 401 challenge).
const recordingFetch = async (input, init) => {
  const response = await fetch(input, init);
  const target = String(input instanceof Request ? input.url : input);
  if (target.startsWith(url)) report.statuses.push(response.status);
  return response;
};

const provider = new ClientCredentialsProvider({
  clientId: "client-a",
  clientSecret: "secret-a",
  expectedIssuer: issuer,
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  authProvider: provider,
  fetch: recordingFetch,
});
// "legacy": initialize and a session (the SDK's default); a version: pinned (2026-07-28: stateless).
const versionNegotiation = era === "legacy" ? undefined : { mode: { pin: era } };
const client = new Client({ name: "ts-sdk-oauth-test", version: "1.0.0" }, { versionNegotiation });
client.onerror = (error) => report.errors.push(`client: ${error?.message ?? error}`);

try {
  await client.connect(transport);
  report.protocolVersion = transport.protocolVersion ?? null;
  const echoed = await client.callTool({ name: "echo", arguments: { text: "authorized" } });
  report.echo = echoed.content?.[0]?.text;
  report.tokenScope = (await provider.tokens())?.scope ?? null;

  // A long call, aborted once the server has had time to start it.
  const controller = new AbortController();
  const call = client.callTool({ name: "slow", arguments: {} }, { signal: controller.signal });
  await sleep(700);
  controller.abort("user pressed stop");
  try {
    await call;
    report.abortOutcome = "resolved";
  } catch (error) {
    report.abortOutcome = controller.signal.aborted ? "aborted" : `error: ${error}`;
  }
  const after = await client.callTool({ name: "echo", arguments: { text: "still here" } });
  report.afterAbort = after.content?.[0]?.text;
  await client.close();
} catch (error) {
  report.errors.push(`fatal: ${error?.stack ?? error}`);
}
console.log(JSON.stringify(report));
