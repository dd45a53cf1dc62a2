/**
 * Detached JWS signatures of the `kube-public/cluster-info` ConfigMap, as
 * Kubernetes' bootstrap signer writes them (`jws-kubeconfig-<token id>`) and
 * kubeadm's token discovery checks them: HS256 keyed with the token secret,
 * protected header `{"alg":"HS256","kid":"<token id>"}`, the payload (the
 * ConfigMap's `kubeconfig`) left out (`<header>..<signature>`).
 *
 * A joining node that knows a token can thus trust the cluster CA in
 * cluster-info, fetched over TLS it cannot verify yet.
 *
 * @module
 */

/** The ConfigMap data key of a token's signature. */
export function clusterInfoSignatureKey(tokenId: string): string {
  return `jws-kubeconfig-${tokenId}`;
}

const encoder = new TextEncoder();

function base64url(bytes: Uint8Array): string {
  return bytes.toBase64({ alphabet: "base64url", omitPadding: true });
}

async function hmacKey(tokenSecret: string): Promise<CryptoKey> {
  return await crypto.subtle.importKey(
    "raw",
    encoder.encode(tokenSecret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

function protectedHeader(tokenId: string): string {
  return base64url(encoder.encode(JSON.stringify({ alg: "HS256", kid: tokenId })));
}

/** The detached signature of `content` for the token `tokenId.tokenSecret`. */
export async function signClusterInfo(
  content: string,
  tokenId: string,
  tokenSecret: string,
): Promise<string> {
  const header = protectedHeader(tokenId);
  const input = encoder.encode(`${header}.${base64url(encoder.encode(content))}`);
  const signature = await crypto.subtle.sign("HMAC", await hmacKey(tokenSecret), input);
  return `${header}..${base64url(new Uint8Array(signature))}`;
}

/**
 * Whether `detached` is the signature of `content` by the token
 * `tokenId.tokenSecret` (constant-time in the signature).
 */
export async function verifyClusterInfo(
  detached: string,
  content: string,
  tokenId: string,
  tokenSecret: string,
): Promise<boolean> {
  const parts = detached.split(".");
  if (parts.length !== 3 || parts[1] !== "" || parts[0] !== protectedHeader(tokenId)) return false;
  let signature: Uint8Array<ArrayBuffer>;
  try {
    signature = Uint8Array.fromBase64(parts[2], { alphabet: "base64url" });
  } catch {
    return false;
  }
  const input = encoder.encode(`${parts[0]}.${base64url(encoder.encode(content))}`);
  return await crypto.subtle.verify("HMAC", await hmacKey(tokenSecret), signature, input);
}
