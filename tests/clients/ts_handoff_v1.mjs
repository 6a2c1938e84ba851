// The official TypeScript SDK 1.x (@modelcontextprotocol/sdk, the 2025-11-25 era: `initialize`), without
// the tasks extension, driving handed-off tasks (docs/handoff.md) with task_status, task_respond and
// task_cancel as two principals.
// Usage: node ts_handoff_v1.mjs <url> <alice-token> <bob-token> [output-schema]. Prints one JSON object of what
// it saw; with `output-schema`, only what a handoff tool with an outputSchema (count_primes) does.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, aliceToken, bobToken, part] = process.argv.slice(2);
const connect = async token => {
  const client = new Client({ name: 'mcp-tasks-tests', version: '0' }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return { client, transport };
};

const text = result => (result.content ?? []).map(block => block.text ?? '').join('');
const status = result => result.structuredContent?.status;
const attempt = async call => {
  try {
    return await call();
  } catch (error) {
    return { thrown: String(error?.message ?? error), code: error?.code ?? null };
  }
};
// task_status, waiting on the server for changes, until `done(result)`; bounded to 40 calls of <= 2 s.
const follow = async (client, taskId, done) => {
  for (let i = 0; i < 40; i++) {
    const result = await client.callTool({ name: 'task_status', arguments: { taskId, waitSeconds: 2 } });
    if (done(result)) return result;
  }
  throw new Error(`task ${taskId} did not get there`);
};
const answerName = (waiting, name) =>
  Object.fromEntries(
    Object.keys(waiting.structuredContent.inputRequests).map(key => [key, { action: 'accept', content: { name } }]),
  );

const { client: alice, transport } = await connect(aliceToken);
const seen = { protocolVersion: transport.protocolVersion, server: alice.getServerVersion()?.name ?? null };
seen.tools = (await alice.listTools()).tools.map(tool => tool.name);
const call = (name, args) => alice.callTool({ name, arguments: args });

if (part === 'output-schema') {
  // the 1.x client validates every result of a tool that declares an outputSchema against it
  const started = await attempt(() => call('count_primes', { limit: 1000 }));
  seen.started = started;
  const taskId = started._meta?.['io.mcptasks/taskId'];
  if (taskId) seen.finished = await attempt(() => follow(alice, taskId, result => status(result) === undefined));
  await alice.close();
  console.log(JSON.stringify(seen));
  process.exit(0);
}

const startedAt = Date.now();
const started = await call('sleeper', { seconds: 0.3 });
seen.startedAfterMs = Date.now() - startedAt;
const quick = started.structuredContent.taskId;
seen.started = { text: text(started), structured: started.structuredContent, meta: started._meta ?? null };
const finished = await follow(alice, quick, result => status(result) === undefined);
seen.finished = { text: text(finished), isError: finished.isError === true, taskId: quick };

const hello = (await call('hello_world', {})).structuredContent.taskId;
const waiting = await follow(alice, hello, result => status(result) === 'input_required');
seen.asked = Object.values(waiting.structuredContent.inputRequests).map(request => request.params.message);
const responded = await call('task_respond', { taskId: hello, inputResponses: answerName(waiting, 'Ada') });
seen.responded = { text: text(responded), isError: responded.isError === true };
seen.greeted = text(await follow(alice, hello, result => status(result) === undefined));

const long = (await call('sleeper', { seconds: 60 })).structuredContent.taskId;
const cancel = await call('task_cancel', { taskId: long });
seen.cancel = { text: text(cancel), isError: cancel.isError === true };
const cancelled = await follow(alice, long, result => status(result) === 'cancelled');
seen.cancelled = { text: text(cancelled), isError: cancelled.isError === true, taskId: long };

// bob, on alice's task that waits for her answer, and on an id nobody has: the same answers
const pending = (await call('hello_world', {})).structuredContent.taskId;
await follow(alice, pending, result => status(result) === 'input_required');
seen.pending = pending;
const { client: bob } = await connect(bobToken);
const unknown = '0'.repeat(32);
const extras = {
  task_status: { waitSeconds: 1 },
  task_respond: { inputResponses: { name: { action: 'accept', content: { name: 'Bob' } } } },
  task_cancel: {},
};
seen.foreign = {};
for (const [name, extra] of Object.entries(extras)) {
  const foreign = await attempt(() => bob.callTool({ name, arguments: { taskId: pending, ...extra } }));
  const missing = await attempt(() => bob.callTool({ name, arguments: { taskId: unknown, ...extra } }));
  seen.foreign[name] = { foreign, unknown: missing };
}
await bob.close();
seen.stillPending = status(await call('task_status', { taskId: pending }));

await alice.close();
console.log(JSON.stringify(seen));
