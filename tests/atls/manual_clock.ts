/**
 * A {@linkcode Clock} the test moves by hand.
 *
 * @module
 */
import type { Clock } from "../../src/clock.ts";

/** A clock standing at `time` (Unix ms) until the test sets it. */
export class ManualClock implements Clock {
  constructor(public time: number) {}
  now = (): number => this.time;
}
