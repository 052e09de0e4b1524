// The official TypeScript SDK client against our server: connect, call with progress,
// abort with an AbortController, and check that nothing reaches the client afterwards.
//
// Usage: node ts_client_abort.mjs <url>   (run by tests/interop/test_ts_sdk_client.py)
// Prints one JSON object: what happened, for the test to assert on.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.argv[2]);
const report = { errors: [], progressBeforeAbort: 0, progressAfterAbort: 0 };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const transport = new StreamableHTTPClientTransport(url);
const client = new Client({ name: "ts-sdk-abort-test", version: "1.0.0" });
client.onerror = (error) => report.errors.push(`client: ${error?.message ?? error}`);

await client.connect(transport);
report.protocolVersion = transport.protocolVersion ?? null;
report.sessionId = transport.sessionId ?? null;

// 1. A call with progress that completes.
const seen = [];
const done = await client.callTool({ name: "count", arguments: { n: 3, delay: 0.01 } }, undefined, {
  onprogress: (p) => seen.push(p.progress),
});
report.completed = { text: done.content?.[0]?.text, progress: seen };

// 2. A long call, aborted after its first progress notification. Its steps are a second apart:
// a progress notification the server wrote before the cancel reached it would reach the client
// after the abort whatever the server does (MCP's accepted race), so the test leaves the cancel
// ample time to arrive first; anything the client sees after the abort is then the server's fault.
const controller = new AbortController();
let aborted = false;
const call = client.callTool({ name: "count", arguments: { n: 1000, delay: 1.0 } }, undefined, {
  signal: controller.signal,
  onprogress: () => {
    if (aborted) report.progressAfterAbort += 1;
    else {
      report.progressBeforeAbort += 1;
      aborted = true;
      controller.abort("user pressed stop");
    }
  },
});
try {
  await call;
  report.abortOutcome = "resolved";
} catch (error) {
  report.abortOutcome = error?.name === "AbortError" || controller.signal.aborted ? "aborted" : `error: ${error}`;
}

// 3. Wait: no late response, no late progress, no transport error may arrive.
await sleep(1500);

// 4. The connection still works.
const after = await client.callTool({ name: "echo", arguments: { text: "still here" } });
report.afterAbort = after.content?.[0]?.text;

await sleep(300);
await client.close();
console.log(JSON.stringify(report));
