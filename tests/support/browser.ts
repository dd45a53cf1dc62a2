/**
 * A real browser for the console's tests: Debian's chromium
 * (`/usr/bin/chromium`, installed by scripts/install-tools.sh), headless,
 * driven by playwright-core from package.json. Playwright never downloads a
 * browser here: it is only given the executable.
 *
 * Flags: no sandbox (tests run as root), no GPU, and none of chromium's
 * background traffic (component updates, sync, QUIC probes), which would
 * otherwise flood a machine without Internet access. Playwright gives every
 * launch a fresh profile directory and removes it on close.
 *
 * @module
 */
import type { Browser, Page } from "playwright-core";

/** Where Debian installs chromium. */
export const CHROMIUM = "/usr/bin/chromium";

/** chromium's flags for the tests. */
export const CHROMIUM_ARGS: readonly string[] = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Launches headless chromium; close it with `browser.close()`. */
export async function launchChromium(): Promise<Browser> {
  try {
    await Deno.stat(CHROMIUM);
  } catch {
    throw new Error(
      `${CHROMIUM} is missing: install it with scripts/install-tools.sh (apt-get install chromium)`,
    );
  }
  // playwright-core probes /proc/sys/fs/binfmt_misc (WSL detection for opening apps) when it is imported,
  // and Deno lets a program read there only with --allow-all; its own test switch skips the probe.
  Deno.env.set("__IS_WSL_TEST__", "1");
  const { chromium } = await import("playwright-core");
  return await chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_ARGS] });
}

/** The tests' screenshots: `test-output/console/` in the checkout (git ignores it). */
export const SCREENSHOT_DIR: string = decodeURIComponent(
  new URL("../../test-output/console/", import.meta.url).pathname,
);

/** Saves a full-page screenshot of `page` as `<name>.png` under {@linkcode SCREENSHOT_DIR}; returns its path. */
export async function screenshot(page: Page, name: string): Promise<string> {
  await Deno.mkdir(SCREENSHOT_DIR, { recursive: true });
  const path = `${SCREENSHOT_DIR}${name}.png`;
  await page.screenshot({ path, fullPage: true });
  return path;
}
