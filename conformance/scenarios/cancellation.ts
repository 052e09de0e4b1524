/**
 * Request cancellation, server side: the scenarios the suite lacks
 * (modelcontextprotocol/conformance#433).
 *
 * Each scenario calls a slow fixture tool, cancels it the way its spec
 * version says, and asks a second fixture whether the tool stopped:
 *
 *   - `test_cancellable_work {probe, seconds?}` works for `seconds`
 *     (default 30), sends `notifications/progress` every ~100 ms when the
 *     request carries a `progressToken` (the first at once), and records
 *     under `probe` how it ended: `running`, then `cancelled` or `completed`.
 *     It MAY run as a task (Tasks extension) when the client declares it.
 *   - `test_cancellation_status {probe}` answers that record as text:
 *     `running`, `cancelled`, `completed` or `unknown`.
 *
 * Severity follows the keyword of the requirement: the 2025-11-25
 * cancellation utility says a receiver SHOULD stop and SHOULD NOT respond
 * (WARNING); 2026-07-28 says a closed response stream MUST be treated as
 * cancellation (FAILURE); cancelling another session's request breaks the
 * isolation every revision assumes (FAILURE).
 */

import type { ClientScenario, ConformanceCheck, RunContext, SpecReference } from './suite.ts';
import { isResponse, Peer, probeName, sleep, TASKS_EXTENSION_ID, type Message } from './wire.ts';

const LEGACY_REF: SpecReference = {
  id: 'MCP-2025-11-25-cancellation',
  url: 'https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/cancellation'
};
const MODERN_REF: SpecReference = {
  id: 'MCP-2026-07-28-cancellation',
  url: 'https://modelcontextprotocol.io/specification/2026-07-28/basic/patterns/cancellation'
};
const HTTP_REF: SpecReference = {
  id: 'MCP-Streamable-HTTP',
  url: 'https://modelcontextprotocol.io/specification/2026-07-28/basic/transports'
};
const TASKS_REF: SpecReference = { id: 'SEP-2663' };

const WORK = 'test_cancellable_work';
const STATUS = 'test_cancellation_status';
/** How long a server has to act on a cancel before the checks look. */
const SETTLE_MS = 5_000;
/** Messages already on the wire when a cancel lands are a race the spec allows. */
const IN_FLIGHT_MS = 500;

type Severity = 'FAILURE' | 'WARNING';

function check(
  id: string,
  description: string,
  errors: string[],
  refs: SpecReference[],
  severity: Severity,
  details?: Record<string, unknown>
): ConformanceCheck {
  return {
    id,
    name: id.replace(/(^|-)(\w)/g, (_, _dash: string, c: string) => c.toUpperCase()),
    description,
    status: errors.length === 0 ? 'SUCCESS' : severity,
    timestamp: new Date().toISOString(),
    errorMessage: errors.length > 0 ? errors.join('; ') : undefined,
    specReferences: refs,
    details
  };
}

function untestable(ids: string[], reason: string, refs: SpecReference[]): ConformanceCheck[] {
  return ids.map((id) => check(id, 'Not testable', [`Not testable: ${reason}`], refs, 'FAILURE'));
}

function errMsg(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Poll the status fixture until *done* holds or SETTLE_MS pass; the last answer. */
async function probeUntil(
  peer: Peer,
  probe: string,
  done: (status: string) => boolean,
  ms = SETTLE_MS
): Promise<string> {
  const deadline = Date.now() + ms;
  let status = await peer.callText(STATUS, { probe });
  while (!done(status) && Date.now() < deadline) {
    await sleep(100);
    status = await peer.callText(STATUS, { probe });
  }
  return status;
}

function isProgress(message: Message): boolean {
  return message.method === 'notifications/progress';
}

/**
 * Start the slow tool with a progress token and wait for its first progress:
 * then the server has certainly dispatched it, and a cancel is not a race
 * with its arrival.
 */
async function startWork(peer: Peer, probe: string, id: number) {
  const call = await peer.send(
    'tools/call',
    { name: WORK, arguments: { probe, seconds: 30 }, _meta: { progressToken: `${probe}-progress` } },
    { id }
  );
  const first = await call.stream.next(SETTLE_MS);
  if (first === 'end' || first === 'timeout' || !isProgress(first)) {
    call.stream.cancel();
    throw new Error(
      `${WORK} sent no notifications/progress first (got ${JSON.stringify(first)}, HTTP ${call.status})`
    );
  }
  return call;
}

/** (a) notifications/cancelled stops the tool; no response follows (2025-11-25). */
export class CancellationNotificationScenario implements ClientScenario {
  name = 'cancellation-notification-stops-tool';
  readonly source = { introducedIn: '2025-03-26', removedIn: '2026-07-28' } as const;
  description = `A POSTed \`notifications/cancelled\` for an in-flight \`tools/call\` is accepted
(202), the server stops the tool (SHOULD) and sends no response for it (SHOULD NOT respond).
Fixtures: \`${WORK}\`, \`${STATUS}\`.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const ids = [
      'cancellation-notification-accepted',
      'cancellation-notification-no-response',
      'cancellation-notification-stops-work'
    ];
    const probe = probeName(this.name);
    let peer: Peer | undefined;
    try {
      peer = await Peer.open(ctx);
      const call = await startWork(peer, probe, 41);
      const accepted = await peer.notify('notifications/cancelled', {
        requestId: 41,
        reason: 'conformance: cancellation-notification-stops-tool'
      });
      const { messages, ended } = await call.stream.drain(2_000);
      call.stream.cancel();
      const responses = messages.filter((m) => isResponse(m) && m.id === 41);
      const status = await probeUntil(peer, probe, (s) => s !== 'running');
      return [
        check(
          ids[0],
          'The server accepts the notifications/cancelled POST with 202',
          accepted === 202 ? [] : [`HTTP ${accepted}, expected 202 Accepted`],
          [LEGACY_REF, HTTP_REF],
          'FAILURE',
          { httpStatus: accepted }
        ),
        check(
          ids[1],
          'No response for the cancelled request is sent after the cancel',
          responses.map((m) => `response sent for the cancelled request: ${JSON.stringify(m)}`),
          [LEGACY_REF],
          'WARNING',
          { messagesAfterCancel: messages.length, streamEnded: ended }
        ),
        check(
          ids[2],
          'The tool stops: the status fixture reports it cancelled',
          status === 'cancelled' ? [] : [`${STATUS} says "${status}" ${SETTLE_MS} ms after the cancel`],
          [LEGACY_REF],
          'WARNING',
          { probe, status }
        )
      ];
    } catch (error) {
      return untestable(ids, errMsg(error), [LEGACY_REF]);
    } finally {
      await peer?.close();
    }
  }
}

/** (b) Closing the response stream cancels the request (2026-07-28). */
export class CancellationStreamCloseScenario implements ClientScenario {
  name = 'cancellation-stream-close-stops-tool';
  readonly source = { introducedIn: '2026-07-28' } as const;
  description = `Closing the response stream of an in-flight \`tools/call\` MUST be treated as
cancellation of that request: the tool stops, and the server keeps serving. Works whether the
server answers with SSE or JSON (the client waits until the tool runs, then drops the
connection). Fixtures: \`${WORK}\`, \`${STATUS}\`.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const ids = ['cancellation-stream-close-stops-work', 'cancellation-stream-close-still-serves'];
    const probe = probeName(this.name);
    try {
      const caller = await Peer.open(ctx);
      const observer = await Peer.open(ctx);
      const abort = new AbortController();
      // Not awaited: a JSON-mode server sends its headers only with the result.
      const pending = caller
        .send('tools/call', { name: WORK, arguments: { probe, seconds: 30 } }, { signal: abort.signal })
        .catch(() => undefined);
      const before = await probeUntil(observer, probe, (s) => s === 'running');
      if (before !== 'running') {
        abort.abort();
        return untestable(ids, `${WORK} never reported running (status "${before}")`, [MODERN_REF]);
      }
      abort.abort();
      (await pending)?.stream.cancel();
      const status = await probeUntil(observer, probe, (s) => s !== 'running');
      let serves: string[] = [];
      try {
        const again = await observer.callText(STATUS, { probe });
        if (!again) serves = ['an empty answer to a request after the close'];
      } catch (error) {
        serves = [`a request after the close failed: ${errMsg(error)}`];
      }
      return [
        check(
          ids[0],
          'Closing the stream cancels the request: the status fixture reports it cancelled',
          status === 'cancelled' ? [] : [`${STATUS} says "${status}" ${SETTLE_MS} ms after the close`],
          [MODERN_REF, HTTP_REF],
          'FAILURE',
          { probe, status }
        ),
        check(ids[1], 'The server serves requests after the closed stream', serves, [HTTP_REF], 'FAILURE')
      ];
    } catch (error) {
      return untestable(ids, errMsg(error), [MODERN_REF]);
    }
  }
}

/** (c) Nothing reaches the client for a request after its cancel (2025-11-25). */
export class CancellationSilenceScenario implements ClientScenario {
  name = 'cancellation-no-messages-after-cancel';
  readonly source = { introducedIn: '2025-03-26', removedIn: '2026-07-28' } as const;
  description = `After a \`notifications/cancelled\` for a \`tools/call\` that reports progress
every ~100 ms, neither progress nor a result for that request reaches the client (progress
within ${IN_FLIGHT_MS} ms of the cancel's 202 counts as already in flight). Fixtures: \`${WORK}\`.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const ids = ['cancellation-no-progress-after-cancel', 'cancellation-no-result-after-cancel'];
    const probe = probeName(this.name);
    let peer: Peer | undefined;
    try {
      peer = await Peer.open(ctx);
      const call = await startWork(peer, probe, 43);
      await sleep(250); // a few progress notifications, so the ticking is established
      await peer.notify('notifications/cancelled', { requestId: 43, reason: 'conformance' });
      const early = await call.stream.drain(IN_FLIGHT_MS);
      const { messages } = await call.stream.drain(1_500);
      call.stream.cancel();
      const progress = messages.filter(isProgress);
      // A response is never in flight by accident: the tool runs for 30 s.
      const results = [...early.messages, ...messages].filter((m) => isResponse(m) && m.id === 43);
      return [
        check(
          ids[0],
          'No notifications/progress for the request after its cancel',
          progress.length ? [`${progress.length} progress notifications after the cancel`] : [],
          [LEGACY_REF],
          'WARNING',
          { late: progress.slice(0, 3) }
        ),
        check(
          ids[1],
          'No result or error for the request after its cancel',
          results.map((m) => `response after the cancel: ${JSON.stringify(m)}`),
          [LEGACY_REF],
          'WARNING'
        )
      ];
    } catch (error) {
      return untestable(ids, errMsg(error), [LEGACY_REF]);
    } finally {
      await peer?.close();
    }
  }
}

/** (d) tasks/cancel settles the task `cancelled`, and it stays so (Tasks extension). */
export class CancellationTasksCancelScenario implements ClientScenario {
  name = 'cancellation-tasks-cancel-stops-task';
  readonly source = { extensionId: 'io.modelcontextprotocol/tasks' } as const;
  description = `\`tasks/cancel\` on a working task is acknowledged with an empty result, the task
settles \`cancelled\` (the fixture's contract, as for the suite's \`slow_compute\`), stays
\`cancelled\` with no inlined result, and the work stops (SHOULD: cancellation is
cooperative). \`tasks/cancel\` of an unknown taskId gets -32602 (SHOULD). Fixtures: \`${WORK}\`
(task-supporting), \`${STATUS}\`.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const ids = [
      'cancellation-tasks-cancel-ack',
      'cancellation-tasks-cancel-settles-cancelled',
      'cancellation-tasks-cancel-stays-cancelled',
      'cancellation-tasks-cancel-stops-work',
      'cancellation-tasks-cancel-unknown-id'
    ];
    const probe = probeName(this.name);
    try {
      const peer = await Peer.open(ctx, { extensions: { [TASKS_EXTENSION_ID]: {} } });
      const call = await peer.send('tools/call', { name: WORK, arguments: { probe, seconds: 30 } });
      const { response: created } = await call.stream.responseTo(call.id, SETTLE_MS);
      call.stream.cancel(); // a server that runs it in line is cancelled by the close
      const taskId = created?.result?.taskId;
      if (created?.result?.resultType !== 'task' || typeof taskId !== 'string') {
        const got = created ? JSON.stringify(created) : `no answer within ${SETTLE_MS} ms`;
        return untestable(ids, `${WORK} did not run as a task (${got})`, [TASKS_REF]);
      }
      await probeUntil(peer, probe, (s) => s === 'running');
      const ack = await peer.request('tasks/cancel', { taskId });
      const ackErrors: string[] = [];
      if (ack.error) ackErrors.push(`error ${JSON.stringify(ack.error)}`);
      else {
        const resultType = ack.result?.resultType ?? 'complete';
        if (resultType !== 'complete') ackErrors.push(`resultType ${JSON.stringify(resultType)}`);
        for (const key of ['taskId', 'status', 'result']) {
          if (ack.result && key in ack.result) ackErrors.push(`the ack carries "${key}"`);
        }
      }
      const deadline = Date.now() + SETTLE_MS;
      let task = (await peer.request('tasks/get', { taskId })).result ?? {};
      while (!['completed', 'failed', 'cancelled'].includes(task.status) && Date.now() < deadline) {
        await sleep(100);
        task = (await peer.request('tasks/get', { taskId })).result ?? {};
      }
      const settled = task.status;
      await sleep(IN_FLIGHT_MS);
      const later = (await peer.request('tasks/get', { taskId })).result ?? {};
      const stays: string[] = [];
      if (later.status !== settled) stays.push(`status moved from "${settled}" to "${later.status}"`);
      if (settled === 'cancelled' && 'result' in later) stays.push('a cancelled task inlines a result');
      const work = await probeUntil(peer, probe, (s) => s !== 'running');
      const unknown = await peer.request('tasks/cancel', {
        taskId: 'conformance-cancellation-unknown-task'
      });
      return [
        check(ids[0], 'tasks/cancel is acknowledged with an empty result', ackErrors, [TASKS_REF], 'FAILURE'),
        check(
          ids[1],
          'The task settles cancelled',
          settled === 'cancelled' ? [] : [`status "${settled}" ${SETTLE_MS} ms after the cancel`],
          [TASKS_REF],
          'FAILURE',
          { taskId, status: settled }
        ),
        check(ids[2], 'A cancelled task stays cancelled, with no result', stays, [TASKS_REF], 'FAILURE'),
        check(
          ids[3],
          'The work behind the task stops',
          work === 'cancelled' ? [] : [`${STATUS} says "${work}"`],
          [TASKS_REF],
          'WARNING',
          { probe, status: work }
        ),
        check(
          ids[4],
          'tasks/cancel of an unknown taskId is a -32602 error',
          unknown.error?.code === -32602 ? [] : [`got ${JSON.stringify(unknown.error ?? unknown.result)}`],
          [TASKS_REF],
          'WARNING'
        )
      ];
    } catch (error) {
      return untestable(ids, errMsg(error), [TASKS_REF]);
    }
  }
}

/** (e) A cancel for an unknown id, or for another client's request, changes nothing. */
export class CancellationForeignIdScenario implements ClientScenario {
  name = 'cancellation-unknown-or-foreign-id';
  readonly source = { introducedIn: '2025-03-26' } as const;
  description = `A \`notifications/cancelled\` whose requestId names a request of another client
(another session on the stateful wire, another POST on the stateless one; the same id
number) does not cancel it: that call completes with its result. One whose requestId was never
issued is ignored: accepted or refused with a 4xx, never a 5xx, and the sender is still
served. Fixtures: \`${WORK}\`, \`${STATUS}\`.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const ids = ['cancellation-foreign-id-ignored', 'cancellation-unknown-id-ignored'];
    const refs = [ctx.specVersion === '2026-07-28' ? MODERN_REF : LEGACY_REF];
    const probe = probeName(this.name);
    let owner: Peer | undefined;
    let stranger: Peer | undefined;
    try {
      owner = await Peer.open(ctx);
      stranger = await Peer.open(ctx);
      const call = await owner.send(
        'tools/call',
        { name: WORK, arguments: { probe, seconds: 1.5 } },
        { id: 7 }
      );
      await probeUntil(stranger, probe, (s) => s === 'running');
      const foreign = await stranger.notify('notifications/cancelled', { requestId: 7 });
      const unknown = await stranger.notify('notifications/cancelled', {
        requestId: 'conformance-never-issued'
      });
      const { response } = await call.stream.responseTo(7, 10_000);
      call.stream.cancel();
      const status = await probeUntil(stranger, probe, (s) => s !== 'running');
      const foreignErrors: string[] = [];
      if (!response?.result || response.result.isError) {
        foreignErrors.push(`the other client's call got ${JSON.stringify(response ?? 'no response')}`);
      }
      if (status !== 'completed') foreignErrors.push(`${STATUS} says "${status}"`);
      const unknownErrors: string[] = [];
      for (const [what, code] of [['foreign', foreign], ['unknown', unknown]] as const) {
        if (code >= 500) unknownErrors.push(`the ${what} cancel got HTTP ${code}`);
      }
      try {
        await stranger.callText(STATUS, { probe });
      } catch (error) {
        unknownErrors.push(`the sender is no longer served: ${errMsg(error)}`);
      }
      return [
        check(
          ids[0],
          "A cancel naming another client's request id does not cancel it",
          foreignErrors,
          refs,
          'FAILURE',
          { probe, status, httpStatus: foreign }
        ),
        check(
          ids[1],
          'A cancel naming a never-issued id is ignored',
          unknownErrors,
          refs,
          'FAILURE',
          { httpStatus: unknown }
        )
      ];
    } catch (error) {
      return untestable(ids, errMsg(error), refs);
    } finally {
      await owner?.close();
      await stranger?.close();
    }
  }
}

export const cancellationScenarios: ClientScenario[] = [
  new CancellationNotificationScenario(),
  new CancellationStreamCloseScenario(),
  new CancellationSilenceScenario(),
  new CancellationTasksCancelScenario(),
  new CancellationForeignIdScenario()
];
