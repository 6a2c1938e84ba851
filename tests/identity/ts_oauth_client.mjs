// The official TypeScript client (@modelcontextprotocol/client 2.x) with its client-credentials auth provider:
// it meets our 401, reads the Protected Resource Metadata, discovers the issuer, gets a token and calls.
// Usage: node ts_oauth_client.mjs <mcp url> <issuer> <client id> <client secret>. Prints one JSON object.
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, issuer, clientId, clientSecret] = process.argv.slice(2);

// hydra takes the RFC 8707 resource as `audience` (it ignores `resource`): send both.
class HydraClientCredentials extends ClientCredentialsProvider {
  prepareTokenRequest(scope) {
    const params = super.prepareTokenRequest(scope);
    params.set('audience', url);
    return params;
  }
}

const provider = new HydraClientCredentials({ clientId, clientSecret, expectedIssuer: issuer });
const client = new Client({ name: 'mcp-tasks-tests', version: '0' }, { capabilities: { elicitation: {} } });
client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { name: 'Grace' } }));
await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
const result = await client.callTool({ name: 'hello_world', arguments: {} });
const text = (result.content ?? []).map(block => block.text ?? '').join('');
const token = provider.tokens()?.access_token ?? '';
await client.close();
console.log(JSON.stringify({ text, isError: result.isError === true, tokenParts: token.split('.').length }));
