// The official TypeScript SDK client (v1) against our legacy streams: the GET stream and resumption.
//
// Usage: node ts_client_resume.mjs <url>   (run by tests/interop/test_ts_sdk_resumption.py)
// Connects (2025-11-25: initialize, a session, the GET stream), calls a tool that closes its own
// SSE connection mid-call (SEP-1699 polling: the SDK reconnects with Last-Event-ID), and counts
// the tools/list_changed notifications the GET stream brings. Prints one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const url = new URL(process.argv[2]);
const report = { errors: [], listChanged: 0 };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const transport = new StreamableHTTPClientTransport(url);
const client = new Client({ name: "ts-sdk-resume-test", version: "1.0.0" });
client.onerror = (error) => report.errors.push(`client: ${error?.message ?? error}`);
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  report.listChanged += 1;
});

await client.connect(transport);
report.protocolVersion = transport.protocolVersion ?? null;
report.capabilities = client.getServerCapabilities() ?? null;
await sleep(500); // the GET stream opens after initialize

const progress = [];
const polled = await client.callTool({ name: "polling", arguments: {} }, undefined, {
  onprogress: (p) => progress.push(p.progress),
  timeout: 20000,
});
report.polled = { text: polled.content?.[0]?.text, progress };

await client.callTool({ name: "change", arguments: {} });
await sleep(1000);

await client.close();
console.log(JSON.stringify(report));
