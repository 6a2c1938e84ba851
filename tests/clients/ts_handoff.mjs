// The official TypeScript client (@modelcontextprotocol/client 2.x), without the tasks extension, driving
// handed-off tasks (docs/handoff.md) with task_status, task_respond and task_cancel.
// Usage: node ts_handoff.mjs <url> <legacy|auto>. Prints one JSON object of what it saw.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode] = process.argv.slice(2);
const options = { capabilities: {} };
if (mode === 'auto') options.versionNegotiation = { mode: 'auto' };
const client = new Client({ name: 'mcp-tasks-tests', version: '0' }, options);
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const text = result => (result.content ?? []).map(block => block.text ?? '').join('');
const call = (name, args) => client.callTool({ name, arguments: args });
// task_status, waiting on the server for changes, until `done(result)`; bounded to 40 calls of <= 2 s.
const follow = async (taskId, done) => {
  for (let i = 0; i < 40; i++) {
    const result = await call('task_status', { taskId, waitSeconds: 2 });
    if (done(result)) return result;
  }
  throw new Error(`task ${taskId} did not get there`);
};
const status = result => result.structuredContent?.status;

const seen = { protocolVersion: client.getNegotiatedProtocolVersion() };
seen.tools = (await client.listTools()).tools.map(tool => tool.name);

const started = await call('sleeper', { seconds: 0.3 });
const quick = started.structuredContent.taskId;
seen.started = { text: text(started), structured: started.structuredContent, meta: started._meta ?? null };
const finished = await follow(quick, result => status(result) === undefined);
seen.finished = { text: text(finished), isError: finished.isError === true };

const hello = (await call('hello_world', {})).structuredContent.taskId;
const waiting = await follow(hello, result => status(result) === 'input_required');
const keys = Object.keys(waiting.structuredContent.inputRequests);
const answers = Object.fromEntries(keys.map(key => [key, { action: 'accept', content: { name: 'Grace' } }]));
seen.asked = keys.map(key => waiting.structuredContent.inputRequests[key].params.message);
seen.responded = text(await call('task_respond', { taskId: hello, inputResponses: answers }));
seen.greeted = text(await follow(hello, result => status(result) === undefined));

const long = (await call('sleeper', { seconds: 60 })).structuredContent.taskId;
seen.cancel = text(await call('task_cancel', { taskId: long }));
const cancelled = await follow(long, result => status(result) === 'cancelled');
seen.cancelled = { text: text(cancelled), isError: cancelled.isError === true, taskId: long };

await client.close();
console.log(JSON.stringify(seen));
