/**
 * The format of Kubernetes bootstrap tokens (`<id>.<secret>`), as the API
 * server's bootstrap authenticator and kubeadm check it, and how to keep
 * tokens out of text that is logged or recorded.
 *
 * @module
 */

/** A bootstrap token: 6 then 16 characters of [a-z0-9], joined by a dot. */
export const BOOTSTRAP_TOKEN_PATTERN: RegExp = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;

/** What replaces a token (or its secret) in redacted text. */
export const REDACTED = "<redacted>";

/** Any substring shaped like a token. */
const TOKEN_ANYWHERE = /\b[a-z0-9]{6}\.[a-z0-9]{16}\b/g;

/** A parsed bootstrap token. `secret` is a credential. */
export interface BootstrapTokenParts {
  /** Public: names the token's Secret `bootstrap-token-<id>`. */
  id: string;
  /** The credential part. */
  secret: string;
}

/** The parts of `token`, or undefined when it does not have the bootstrap token format. */
export function parseBootstrapToken(token: string): BootstrapTokenParts | undefined {
  const match = BOOTSTRAP_TOKEN_PATTERN.exec(token);
  return match ? { id: match[1], secret: match[2] } : undefined;
}

/**
 * `text` with every token-shaped substring and every string of `secrets`
 * (e.g. a malformed token someone passed, which the pattern would miss)
 * replaced by {@linkcode REDACTED}.
 */
export function redactTokens(text: string, secrets: readonly string[] = []): string {
  let result = text.replace(TOKEN_ANYWHERE, REDACTED);
  for (const secret of secrets) if (secret !== "") result = result.replaceAll(secret, REDACTED);
  return result;
}
