// The official TypeScript SDK v2 server (@modelcontextprotocol/server) over HTTP, for our client.
//
// Usage: node ts_server_v2.mjs   (run by tests/interop/test_client_ts_server.py)
// Prints "listening <port>" once it serves http://127.0.0.1:<port>/mcp; prints
// "slow aborted" when the `slow` tool's abort signal fires (our client cancelled it).
// Tools: `echo` (one progress notification), `slow` (waits for its abort signal),
// `ask` (MRTR: asks a name with inputRequired.elicit, modern era; elicitInput, legacy era).
// createMcpHandler serves both eras from one factory (legacy: stateless fallback);
// node:http is bridged to its fetch face by hand (@modelcontextprotocol/node is not pinned).
import http from "node:http";
import { McpServer, acceptedContent, createMcpHandler, inputRequired } from "@modelcontextprotocol/server";
import * as z from "zod/v4";

const NAME = { type: "object", properties: { name: { type: "string" } }, required: ["name"] };

function factory() {
  const server = new McpServer({ name: "ts-v2", version: "1.0.0" });
  server.registerTool("echo", { inputSchema: z.object({ text: z.string() }) }, async ({ text }, ctx) => {
    const token = ctx.mcpReq._meta?.progressToken;
    if (token !== undefined) {
      await ctx.mcpReq.notify({
        method: "notifications/progress",
        params: { progressToken: token, progress: 1, total: 2, message: "half" },
      });
    }
    return { content: [{ type: "text", text }] };
  });
  server.registerTool("slow", { inputSchema: z.object({}) }, async (_args, ctx) => {
    const token = ctx.mcpReq._meta?.progressToken;
    if (token !== undefined) {
      await ctx.mcpReq.notify({
        method: "notifications/progress",
        params: { progressToken: token, progress: 1, total: 10, message: "started" },
      });
    }
    await new Promise((resolve) => {
      if (ctx.mcpReq.signal.aborted) resolve();
      ctx.mcpReq.signal.addEventListener("abort", () => resolve(), { once: true });
    });
    console.log("slow aborted");
    return { content: [{ type: "text", text: "aborted" }] };
  });
  server.registerTool("ask", { inputSchema: z.object({}) }, async (_args, ctx) => {
    const given = acceptedContent(ctx.mcpReq.inputResponses, "who");
    if (given?.name) return { content: [{ type: "text", text: `hi ${given.name}` }] };
    if (ctx.mcpReq.envelope && Object.keys(ctx.mcpReq.envelope).length) {
      return inputRequired({
        inputRequests: { who: inputRequired.elicit({ message: "Name?", requestedSchema: NAME }) },
      });
    }
    const answer = await ctx.mcpReq.elicitInput({ message: "Name?", requestedSchema: NAME });
    return { content: [{ type: "text", text: `hi ${answer.content?.name}` }] };
  });
  return server;
}

const handler = createMcpHandler(factory);

const httpServer = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const abort = new AbortController();
  res.on("close", () => abort.abort()); // the client closed the stream: the request's signal
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const body = chunks.length && req.method !== "GET" && req.method !== "HEAD" ? Buffer.concat(chunks) : undefined;
  const request = new Request(`http://${req.headers.host}${req.url}`, {
    method: req.method,
    headers,
    body,
    signal: abort.signal,
  });
  let response;
  try {
    response = await handler.fetch(request);
  } catch (error) {
    res.writeHead(500).end(String(error));
    return;
  }
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (!response.body) {
    res.end();
    return;
  }
  try {
    for await (const chunk of response.body) {
      if (!res.write(chunk)) await new Promise((resolve) => res.once("drain", resolve));
    }
    res.end();
  } catch {
    res.destroy();
  }
});

httpServer.listen(0, "127.0.0.1", () => console.log(`listening ${httpServer.address().port}`));
