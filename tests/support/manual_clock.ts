/**
 * The test clock: a {@linkcode Clock} the test sets and moves by hand.
 *
 * @module
 */
import type { Clock } from "../../src/clock.ts";

/** A clock standing at `time` (Unix ms) until the test sets or advances it. */
export class ManualClock implements Clock {
  /** The current time, Unix milliseconds. */
  time: number;

  /** A clock standing at `time`; default 2024-05-01T12:00:00Z. */
  constructor(time: number = Date.UTC(2024, 4, 1, 12, 0, 0)) {
    this.time = time;
  }

  /** The current time. */
  now = (): number => this.time;

  /** Moves the clock forward by `ms`. */
  advance(ms: number): void {
    this.time += ms;
  }
}
