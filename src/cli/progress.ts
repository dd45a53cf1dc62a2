/**
 * Progress of a long operation on stderr: on a terminal, the current phase
 * on one line that is rewritten in place (with the time elapsed); otherwise
 * (a pipe, a CI log) one plain line per phase change. stdout stays for
 * results.
 *
 * @module
 */

/** Reports the current phase. */
export interface Progress {
  /** The operation is now in `phase` (printed when it changed). */
  phase(phase: string): void;
  /** Ends the updating line (before other output, and at the end). */
  done(): void;
}

/** Options for {@linkcode createProgress}. */
export interface ProgressOptions {
  /** Where lines go; default stderr. */
  write?: (text: string) => void;
  /** Whether the output is a terminal (one updating line); default: stderr is one. */
  terminal?: boolean;
  /** The clock, in ms; default `Date.now`. */
  now?: () => number;
}

/** Creates a progress reporter. */
export function createProgress(options: ProgressOptions = {}): Progress {
  const encoder = new TextEncoder();
  const write = options.write ?? ((text: string) => Deno.stderr.writeSync(encoder.encode(text)));
  const terminal = options.terminal ?? Deno.stderr.isTerminal();
  const now = options.now ?? Date.now;
  const start = now();
  let current: string | undefined;
  let timer: ReturnType<typeof setInterval> | undefined;
  const draw = () => {
    const seconds = Math.floor((now() - start) / 1000);
    write(`\r\x1b[2K[${seconds}s] ${current}`);
  };
  return {
    phase(phase) {
      if (phase === current) return;
      current = phase;
      if (!terminal) {
        write(`${phase}\n`);
        return;
      }
      draw();
      if (timer === undefined) {
        timer = setInterval(draw, 1000);
        Deno.unrefTimer(timer);
      }
    },
    done() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      if (terminal && current !== undefined) write("\n");
      current = undefined;
    },
  };
}
