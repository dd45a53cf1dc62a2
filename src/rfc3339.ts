/**
 * Timestamps as Kubernetes and Go write them.
 *
 * @module
 */

/**
 * RFC 3339 in UTC with whole seconds (`2024-05-01T12:00:00Z`), as Go's
 * `time.RFC3339` writes a UTC time and Kubernetes stores timestamps.
 * Milliseconds are truncated.
 */
export function rfc3339(time: Date | number): string {
  return new Date(time).toISOString().replace(/\.\d{3}Z$/, "Z");
}
