/**
 * Time as a dependency, so tests inject it instead of faking globals.
 *
 * @module
 */

/** A source of the current time in Unix milliseconds. */
export interface Clock {
  /** The current time, Unix milliseconds. */
  now(): number;
}

/** The system clock. */
export const systemClock: Clock = { now: () => Date.now() };
