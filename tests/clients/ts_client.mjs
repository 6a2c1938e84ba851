// The official TypeScript client (@modelcontextprotocol/client 2.x) against our endpoint.
// Usage: node ts_client.mjs <url> <legacy|auto>. Prints one JSON object of what it saw.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode] = process.argv.slice(2);
const options = { capabilities: { elicitation: {} } };
if (mode === 'auto') options.versionNegotiation = { mode: 'auto' };
const client = new Client({ name: 'mcp-tasks-tests', version: '0' }, options);
const asked = [];
client.setRequestHandler('elicitation/create', async request => {
  asked.push(request.params.message);
  return { action: 'accept', content: { name: 'Grace' } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const text = result => (result.content ?? []).map(block => block.text ?? '').join('');
const attempt = async call => {
  try {
    const result = await call();
    return { text: text(result), isError: result.isError === true };
  } catch (error) {
    return { error: String(error?.message ?? error), code: error?.code };
  }
};
const seen = { protocolVersion: client.getNegotiatedProtocolVersion(), asked };
seen.tools = (await client.listTools()).tools.map(tool => tool.name);
seen.greet = await attempt(() => client.callTool({ name: 'greet', arguments: { name: 'TS' } }));
seen.hello = await attempt(() => client.callTool({ name: 'hello_world', arguments: {} }));
const progress = [];
seen.sleeper = await attempt(() =>
  client.callTool({ name: 'sleeper', arguments: { seconds: 1.5 } }, { onprogress: p => progress.push(p.progress) }),
);
seen.progress = progress;
const abort = new AbortController();
setTimeout(() => abort.abort('the user is bored'), 1500);
const started = Date.now();
seen.cancelled = await attempt(() =>
  client.callTool({ name: 'sleeper', arguments: { seconds: 30 } }, { signal: abort.signal }),
);
seen.cancelledAfterMs = Date.now() - started;
await client.close();
console.log(JSON.stringify(seen));
