/**
 * Where the browser console's built page lies: the directory `console-web/`
 * beside the module that serves it. In the artifact that module is the
 * bundle `dist/console.js`, so `deno task build` writes the page (`build.ts`)
 * to `dist/console-web/` and the artifact needs neither esbuild nor the
 * source tree at run time, wherever `dist/` is copied.
 *
 * @module
 */

/** The files of a built page, relative to its directory. */
export const CONSOLE_FILES = ["index.html", "style.css", "app.js", "app.js.map"] as const;

/** The page directory's name, beside the console's bundle. */
export const PAGE_DIR_NAME = "console-web";

/** The page directory beside the module at `moduleUrl` (a `file:` URL), without a trailing slash. */
export function pageDirBeside(moduleUrl: string): string {
  return decodeURIComponent(new URL(`${PAGE_DIR_NAME}/`, moduleUrl).pathname).replace(/\/$/, "");
}
