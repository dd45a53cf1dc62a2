/**
 * How `cli verify` prints its result: a table for people, or JSON for
 * programs (`--output json`: `renderVerifyJson` of the shared report, the
 * same document the browser console shows).
 *
 * ```text
 * node 10.0.0.5:9000: attestation FAILED (measurement-mismatch)
 * PCR  POLICY     MATCH     EXPECTED                                                          ACTUAL
 *  4   enforced   MISMATCH  4f2c…                                                             9ab1…
 *  9   enforced   ok        …                                                                 …
 * ```
 *
 * Values are printed in full (64 hex digits). Mismatching rows are
 * highlighted in red, and only when `color` is set (a terminal without
 * `NO_COLOR`, see {@linkcode useColor}). The words (verdict, policy, match,
 * why, mismatching PCRs) are the shared report's (`src/verification/report.ts`).
 *
 * @module
 */
import { escapeControlCharacters } from "../json/escape_control.ts";
import {
  matchText,
  mismatchSummary,
  policyText,
  verdictText,
  type VerifyResult,
  whyText,
} from "../verification/report.ts";

const RED = "\x1b[31m";
const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RESET = "\x1b[0m";

/** The output formats of `cli verify`. */
export type VerifyOutput = "table" | "json";

/** Whether to colour output on `stream`: only a terminal, and not when `NO_COLOR` is set (https://no-color.org). */
export function useColor(stream: { isTerminal(): boolean }, noColor: string | undefined): boolean {
  return stream.isTerminal() && (noColor === undefined || noColor === "");
}

/** The human-readable table of a result, ending with a newline. */
export function renderVerifyTable(result: VerifyResult, color: boolean): string {
  const paint = (code: string, text: string) => (color ? `${code}${text}${RESET}` : text);
  const lines: string[] = [];
  lines.push(
    `node ${result.node} (${result.variant}): ${paint(result.passed ? GREEN : RED, verdictText(result))}`,
  );
  if (result.pcrs.length === 0) {
    lines.push("the config lists no measurements");
  } else {
    const header = ["PCR", "POLICY", "MATCH", "EXPECTED", "ACTUAL"];
    const cells = result.pcrs.map((row) => [
      String(row.index),
      policyText(row),
      matchText(row),
      row.expected,
      row.actual ?? "-",
    ]);
    const widths = header.map((title, i) => Math.max(title.length, ...cells.map((cell) => cell[i].length)));
    const format = (cell: string[]) => cell.map((text, i) => text.padEnd(widths[i])).join("  ").trimEnd();
    lines.push(format(header));
    result.pcrs.forEach((row, i) => {
      const line = format(cells[i]);
      if (row.match === false) lines.push(paint(row.enforced ? RED : YELLOW, line));
      else lines.push(line);
    });
  }
  const why = whyText(result);
  // The validator's message may quote what the node sent.
  if (why !== undefined) lines.push(`why: ${escapeControlCharacters(why)}`);
  const mismatching = mismatchSummary(result);
  if (mismatching !== undefined) lines.push(mismatching);
  return `${lines.join("\n")}\n`;
}
