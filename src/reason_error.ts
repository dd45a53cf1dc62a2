/**
 * The shape of the project's error types: an `Error` whose machine-readable
 * `reason` (a string union each module names) goes to logs, metrics and
 * callers' branches, and whose message is for people. Messages never hold
 * secrets.
 *
 * ```ts
 * export type KmsFailure = "invalid-length" | "missing-salt";
 * export class KmsError extends ReasonError<KmsFailure> {}
 * throw new KmsError("invalid-length", "length must be 1 to 8160 bytes");
 * ```
 *
 * @module
 */

/** An error with a machine-readable reason; its `name` is the subclass's name. */
export class ReasonError<Reason extends string> extends Error {
  /** Why, machine-readable. */
  readonly reason: Reason;

  /** An error for `reason`; `message` names what is wrong (never a secret). */
  constructor(reason: Reason, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.reason = reason;
  }
}
