// Resolves credentials with the AWS SDK for JavaScript v3's container credential provider
// (@aws-sdk/credential-provider-http, fromHttp) from $AWS_CONTAINER_CREDENTIALS_FULL_URI or
// $AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, and prints AccessKeyId= and Expiration= (never the secret
// key or the session token). On failure it prints the provider's error on stderr and exits 1.
import { fromHttp } from '@aws-sdk/credential-provider-http';

try {
  const creds = await fromHttp({ timeout: 2000, maxRetries: 3 })();
  process.stdout.write(`AccessKeyId=${creds.accessKeyId}\nExpiration=${creds.expiration?.toISOString() ?? ''}\n`);
} catch (err) {
  process.stderr.write(`container-credentials: ${err.name}: ${err.message}\n`);
  process.exit(1);
}
