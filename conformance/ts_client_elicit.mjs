// The official TypeScript SDK v1 client answering a tool that asks with ctx.elicit / ctx.sample /
// ctx.list_roots (legacy era: the questions arrive on the call's SSE stream), then aborting a call
// whose question is pending: the server must tell the client, whose handler's signal then fires.
//
// Usage: node ts_client_elicit.mjs <url>   (run by tests/interop/test_ts_sdk_elicitation.py)
// Prints one JSON object: what happened, for the test to assert on.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const url = new URL(process.argv[2]);
const report = { errors: [], asked: [], handlerAborted: null };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const transport = new StreamableHTTPClientTransport(url);
const client = new Client(
  { name: "ts-sdk-elicit-test", version: "1.0.0" },
  { capabilities: { elicitation: {}, sampling: {}, roots: {} } },
);
client.onerror = (error) => report.errors.push(`client: ${error?.message ?? error}`);

let pendingAborted;
const abortedNow = new Promise((resolve) => (pendingAborted = resolve));
client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
  report.asked.push(request.params.message);
  if (request.params.message !== "Never answered") {
    return { action: "accept", content: { name: "Ada" } };
  }
  // Never answers: waits until the server cancels this request.
  return await new Promise((resolve, reject) => {
    extra.signal.addEventListener("abort", () => {
      report.handlerAborted = String(extra.signal.reason ?? "aborted");
      pendingAborted();
      reject(new Error("cancelled by the server"));
    });
  });
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => ({
  role: "assistant",
  content: { type: "text", text: request.params.messages[0].content.text.replace("Greet", "Hello") },
  model: "test-model",
}));
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///work" }] }));

await client.connect(transport);
report.protocolVersion = transport.protocolVersion ?? null;

// 1. A tool that asks three questions, answered by the handlers above.
const done = await client.callTool({ name: "greet", arguments: {} });
report.greeted = done.content?.[0]?.text;

// 2. A tool whose question is never answered; the call is aborted once the question arrived.
const controller = new AbortController();
const call = client.callTool({ name: "waits", arguments: {} }, undefined, { signal: controller.signal });
while (!report.asked.includes("Never answered")) await sleep(20);
controller.abort("user pressed stop");
try {
  await call;
  report.abortOutcome = "resolved";
} catch (error) {
  report.abortOutcome = controller.signal.aborted ? "aborted" : `error: ${error}`;
}
await Promise.race([abortedNow, sleep(5000)]);
report.abortedBeforeClose = report.handlerAborted; // closing the client aborts handlers too

// 3. The connection still works.
const after = await client.callTool({ name: "greet", arguments: {} });
report.afterAbort = after.content?.[0]?.text;
await client.close();
console.log(JSON.stringify(report));
