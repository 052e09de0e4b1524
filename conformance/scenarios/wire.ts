/**
 * Raw Streamable HTTP for the cancellation scenarios, in both lifecycles.
 *
 * Cancellation lives in the transport (a POSTed `notifications/cancelled`,
 * a closed response stream), which the suite's `Connection` deliberately
 * hides, so these scenarios drive the wire themselves, as the suite's own
 * session and SSE scenarios do: `Peer` speaks the stateful lifecycle
 * (initialize, Mcp-Session-Id) for 2025-x and the stateless one (per-request
 * `_meta`, SEP-2243 headers) for 2026-07-28; `MessageStream` reads one
 * response, SSE or JSON, message by message with a deadline.
 */

import { isStateless, type RunContext, type SpecVersion } from './suite.ts';

export interface Message {
  jsonrpc: '2.0';
  id?: string | number | null;
  method?: string;
  params?: Record<string, any>;
  result?: Record<string, any>;
  error?: { code: number; message: string; data?: unknown };
}

export const TASKS_EXTENSION_ID = 'io.modelcontextprotocol/tasks';
const CLIENT_INFO = { name: 'conformance-cancellation', version: '1.0.0' };

/** One response's messages: the events of an SSE stream, or a JSON body's one message. */
export class MessageStream {
  readonly sse: boolean;
  ended = false;
  private queue: Message[] = [];
  private buffer = '';
  private reader?: ReadableStreamDefaultReader<Uint8Array>;
  private pending?: Promise<ReadableStreamReadResult<Uint8Array>>;
  private decoder = new TextDecoder();

  private constructor(sse: boolean) {
    this.sse = sse;
  }

  static async of(response: Response): Promise<MessageStream> {
    const type = response.headers.get('content-type') ?? '';
    const stream = new MessageStream(type.includes('text/event-stream'));
    if (stream.sse && response.body) {
      stream.reader = response.body.getReader();
    } else {
      const text = await response.text().catch(() => '');
      try {
        if (text) stream.queue.push(JSON.parse(text) as Message);
      } catch {
        // Not JSON: nothing to deliver.
      }
      stream.ended = true;
    }
    return stream;
  }

  /** The next message, `'end'` once the stream is over, `'timeout'` after *ms*. */
  async next(ms: number): Promise<Message | 'end' | 'timeout'> {
    const deadline = Date.now() + ms;
    for (;;) {
      const queued = this.queue.shift();
      if (queued) return queued;
      if (this.ended || !this.reader) return 'end';
      const left = deadline - Date.now();
      if (left <= 0) return 'timeout';
      this.pending ??= this.reader.read();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), left);
      });
      let read: ReadableStreamReadResult<Uint8Array> | 'timeout';
      try {
        read = await Promise.race([this.pending, timeout]);
      } catch {
        read = { done: true, value: undefined }; // aborted or dropped: the stream is over
      } finally {
        clearTimeout(timer);
      }
      if (read === 'timeout') return 'timeout';
      this.pending = undefined;
      if (read.done) {
        this.ended = true;
        this.parse(true);
      } else {
        this.buffer += this.decoder.decode(read.value, { stream: true });
        this.parse(false);
      }
    }
  }

  /** Every message until the stream ends or *ms* pass, and whether it ended. */
  async drain(ms: number): Promise<{ messages: Message[]; ended: boolean }> {
    const deadline = Date.now() + ms;
    const messages: Message[] = [];
    for (;;) {
      const message = await this.next(Math.max(0, deadline - Date.now()));
      if (message === 'end') return { messages, ended: true };
      if (message === 'timeout') return { messages, ended: false };
      messages.push(message);
    }
  }

  /** Read until the response to *id* (the messages before it are returned too). */
  async responseTo(
    id: string | number,
    ms: number
  ): Promise<{ response?: Message; before: Message[] }> {
    const deadline = Date.now() + ms;
    const before: Message[] = [];
    for (;;) {
      const message = await this.next(Math.max(0, deadline - Date.now()));
      if (message === 'end' || message === 'timeout') return { before };
      if (isResponse(message) && message.id === id) return { response: message, before };
      before.push(message);
    }
  }

  cancel(): void {
    this.reader?.cancel().catch(() => undefined);
  }

  private parse(final: boolean): void {
    const events = this.buffer.split(/\r?\n\r?\n/);
    this.buffer = final ? '' : (events.pop() ?? '');
    for (const event of events) {
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (!data) continue;
      try {
        this.queue.push(JSON.parse(data) as Message);
      } catch {
        // A partial or non-JSON event: not a message.
      }
    }
  }
}

export function isResponse(message: Message): boolean {
  return message.method === undefined && ('result' in message || 'error' in message);
}

export interface Posted {
  status: number;
  stream: MessageStream;
}

/** A client of the server under test in the run's lifecycle (one session when stateful). */
export class Peer {
  readonly url: string;
  readonly version: SpecVersion;
  readonly stateless: boolean;
  sessionId?: string;
  private capabilities: Record<string, unknown>;
  private nextId = 1;

  private constructor(ctx: RunContext, capabilities: Record<string, unknown>) {
    this.url = ctx.serverUrl;
    this.version = ctx.specVersion;
    this.stateless = isStateless(ctx);
    this.capabilities = capabilities;
  }

  /** A new client: on the stateful wire, a new session (initialize, then initialized). */
  static async open(ctx: RunContext, capabilities: Record<string, unknown> = {}): Promise<Peer> {
    const peer = new Peer(ctx, capabilities);
    if (!peer.stateless) {
      const response = await peer.fetch({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: ctx.specVersion, capabilities, clientInfo: CLIENT_INFO }
      });
      peer.sessionId = response.headers.get('mcp-session-id') ?? undefined;
      const { response: answer } = await (await MessageStream.of(response)).responseTo(0, 10_000);
      if (!answer?.result) {
        throw new Error(`initialize failed: ${JSON.stringify(answer ?? response.status)}`);
      }
      await peer.notify('notifications/initialized');
    }
    return peer;
  }

  /** POST a request; its response stream is read by the caller (*signal* aborts it). */
  async send(
    method: string,
    params: Record<string, any> = {},
    options: { id?: string | number; signal?: AbortSignal } = {}
  ): Promise<Posted & { id: string | number }> {
    const id = options.id ?? this.nextId++;
    const response = await this.fetch({ jsonrpc: '2.0', id, method, params }, options.signal);
    return { id, status: response.status, stream: await MessageStream.of(response) };
  }

  /** A request and its response (JSON-RPC errors included), within *ms*. */
  async request(method: string, params: Record<string, any> = {}, ms = 10_000): Promise<Message> {
    const { id, status, stream } = await this.send(method, params);
    const { response } = await stream.responseTo(id, ms);
    stream.cancel();
    if (!response) throw new Error(`no response to ${method} (HTTP ${status})`);
    return response;
  }

  /** POST a notification; the HTTP status (202: accepted). */
  async notify(method: string, params: Record<string, any> = {}): Promise<number> {
    const response = await this.fetch({ jsonrpc: '2.0', method, params });
    await response.arrayBuffer().catch(() => undefined);
    return response.status;
  }

  /** The text of a tool's first content block (the probe tools answer in text). */
  async callText(name: string, args: Record<string, unknown>): Promise<string> {
    const response = await this.request('tools/call', { name, arguments: args });
    if (response.error) throw new Error(`${name}: ${response.error.message}`);
    return String(response.result?.content?.[0]?.text ?? '');
  }

  async close(): Promise<void> {
    if (this.sessionId) {
      await fetch(this.url, { method: 'DELETE', headers: this.headers() })
        .then((r) => r.arrayBuffer())
        .catch(() => undefined);
    }
  }

  private headers(message?: Message): Record<string, string> {
    const headers: Record<string, string> = {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream'
    };
    if (message?.method !== 'initialize') headers['MCP-Protocol-Version'] = this.version;
    if (this.sessionId) headers['Mcp-Session-Id'] = this.sessionId;
    if (this.stateless && message?.method) {
      headers['Mcp-Method'] = message.method;
      const params = message.params ?? {};
      const name =
        message.method === 'tools/call' || message.method === 'prompts/get'
          ? params.name
          : message.method.startsWith('tasks/')
            ? params.taskId
            : message.method === 'resources/read'
              ? params.uri
              : undefined;
      if (typeof name === 'string') headers['Mcp-Name'] = name;
    }
    return headers;
  }

  private fetch(message: Message, signal?: AbortSignal): Promise<Response> {
    if (this.stateless) {
      message = {
        ...message,
        params: {
          ...message.params,
          _meta: {
            'io.modelcontextprotocol/protocolVersion': this.version,
            'io.modelcontextprotocol/clientInfo': CLIENT_INFO,
            'io.modelcontextprotocol/clientCapabilities': this.capabilities,
            ...message.params?._meta
          }
        }
      };
    }
    return fetch(this.url, {
      method: 'POST',
      headers: this.headers(message),
      body: JSON.stringify(message),
      signal
    });
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A probe name no other run shares (the server keeps the latest few hundred). */
export function probeName(scenario: string): string {
  return `${scenario.slice(0, 40)}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
