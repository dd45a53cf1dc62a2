/**
 * Filters the output of `deno doc --lint` (on standard input) for
 * `scripts/check.sh`: prints every diagnostic about the project's own
 * documentation and exits 1 if there is one, or if `deno doc` failed
 * without linting.
 *
 * One kind is waived: `private-type-ref` to a type the linted files do not
 * declare, i.e. one of a dependency (ConnectError, X509Certificate, the
 * Kubernetes types) or of the generated code in `src/gen/`. Such a reference
 * cannot be fixed by documenting anything here (re-exporting those types
 * would make their own undocumented members ours to lint). A reference to a
 * type the linted files declare but do not export is reported: that one is
 * ours to export and document. The count of waived diagnostics is printed.
 *
 * Run: `deno doc --lint <files> 2>&1 | deno run --allow-read=src scripts/doc_lint.ts <files>`
 *
 * @module
 */

/** One `deno doc --lint` diagnostic. */
interface Diagnostic {
  /** The rule, e.g. "missing-jsdoc". */
  rule: string;
  /** The whole diagnostic text. */
  text: string;
}

/** How `deno doc --lint` ends when it found problems, and what may follow (a backtrace). */
const SUMMARY = /^error: Found \d+ documentation lint errors?\.$/;

/**
 * Splits the output into diagnostics (each runs from its `error[rule]:`
 * line to the next, or to the summary) and the lines before the first one,
 * which are something else (e.g. a type error that kept `deno doc` from
 * linting).
 */
function parse(output: string): { diagnostics: Diagnostic[]; other: string[] } {
  const diagnostics: Diagnostic[] = [];
  const other: string[] = [];
  let summarized = false;
  for (const line of output.split("\n")) {
    const start = /^error\[([a-z-]+)\]:/.exec(line);
    if (start) diagnostics.push({ rule: start[1], text: line });
    else if (SUMMARY.test(line)) summarized = true;
    else if (summarized) continue;
    else if (diagnostics.length > 0) diagnostics[diagnostics.length - 1].text += `\n${line}`;
    else if (line.trim() !== "" && !/^Checked \d+ files?$/.test(line)) other.push(line);
  }
  return { diagnostics, other };
}

/** The names of the types, classes and functions `files` declare, exported or not. */
async function declaredNames(files: string[]): Promise<Set<string>> {
  const declaration = /^(?:export )?(?:declare )?(?:interface|type|class|enum|function|const) (\w+)/gm;
  const names = new Set<string>();
  for (const file of files) {
    for (const match of (await Deno.readTextFile(file)).matchAll(declaration)) names.add(match[1]);
  }
  return names;
}

/** Whether a diagnostic is a reference to a type the linted files do not declare. */
function isForeignReference(diagnostic: Diagnostic, declared: Set<string>): boolean {
  if (diagnostic.rule !== "private-type-ref") return false;
  const referenced = /references private type '(\w+)'/.exec(diagnostic.text)?.[1];
  return referenced !== undefined && !declared.has(referenced);
}

const { diagnostics, other } = parse(await new Response(Deno.stdin.readable).text());
const declared = await declaredNames(Deno.args);
const own = diagnostics.filter((diagnostic) => !isForeignReference(diagnostic, declared));
for (const line of other) console.error(line);
for (const diagnostic of own) console.error(diagnostic.text.trimEnd() + "\n");
const waived = diagnostics.length - own.length;
console.error(
  `doc lint: ${own.length} problems; ${waived} references to dependencies' and generated types waived`,
);
if (own.length > 0 || other.length > 0) Deno.exit(1);
