/** src/x509/pem.ts: PEM blocks with and without headers, and hostile text refused in bounded time. */
import assert from "node:assert/strict";
import { decodePem, decodePemBlocks, encodePem, PemError } from "../../src/x509/pem.ts";

Deno.test("decodePemBlocks reads blocks among other text, with headers, LF or CR LF", async (t) => {
  const der = new Uint8Array([0x30, 0x03, 0x02, 0x01, 0x07]);
  const block = encodePem(der, "CERTIFICATE");
  const rows: {
    name: string;
    text: string;
    want: { type: string; headers: { key: string; value: string }[] }[];
  }[] = [
    { name: "one block", text: block, want: [{ type: "CERTIFICATE", headers: [] }] },
    {
      name: "text around two blocks, CR LF",
      text: `subject: x\r\n${block.replaceAll("\n", "\r\n")}between\n${encodePem(der, "EC PRIVATE KEY")}`,
      want: [{ type: "CERTIFICATE", headers: [] }, { type: "EC PRIVATE KEY", headers: [] }],
    },
    {
      name: "RFC 1421 headers, one continued on a line starting with a space",
      text: "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,\n  00FF\n\n" +
        "MAMCAQc=\n-----END RSA PRIVATE KEY-----\n",
      want: [{
        type: "RSA PRIVATE KEY",
        headers: [{ key: "Proc-Type", value: "4,ENCRYPTED" }, { key: "DEK-Info", value: "AES-128-CBC,00FF" }],
      }],
    },
    {
      name: "a label with a single hyphen",
      text: encodePem(der, "RSA-PSS KEY"),
      want: [{ type: "RSA-PSS KEY", headers: [] }],
    },
    { name: "END of another label: no block", text: block.replace("END CERTIFICATE", "END KEY"), want: [] },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const blocks = decodePemBlocks(row.text);
      assert.deepEqual(blocks.map(({ type, headers }) => ({ type, headers })), row.want);
      for (const decoded of blocks) assert.deepEqual(new Uint8Array(decoded.rawData), der);
    });
  }
  assert.throws(
    () => decodePem("nothing here", "ca.crt"),
    (e) => e instanceof PemError && e.reason === "empty",
  );
  assert.throws(
    () => decodePem("-----BEGIN X-----\nAAA\n-----END X-----\n", "ca.crt"),
    (e) => e instanceof PemError && e.message === "ca.crt: PEM data is malformed",
  );
});

Deno.test("hostile PEM text is refused in bounded time, not by trying every way to read it", async (t) => {
  // Header lines that also read as continuations split 2^n ways; BEGIN repeated on one line rescanned it.
  const rows = [
    {
      name: "40 ambiguous header lines",
      text: "-----BEGIN X-----\na: b\n" + " a: b\n".repeat(40) + "\nAAAA\n-----END Y-----\n",
    },
    { name: "BEGIN 50,000 times on one line", text: "-----BEGIN ".repeat(50_000) + "\n" },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const worker = new Worker(new URL("./pem_decode_worker.ts", import.meta.url), { type: "module" });
      try {
        const answer = new Promise<string>((resolve) => worker.onmessage = (event) => resolve(event.data));
        worker.postMessage(row.text);
        let timer: ReturnType<typeof setTimeout> | undefined;
        const bound = new Promise<string>((resolve) =>
          timer = setTimeout(() => resolve("still decoding"), 10_000)
        );
        assert.equal(await Promise.race([answer, bound]), "0 block(s)");
        clearTimeout(timer);
      } finally {
        worker.terminate();
      }
    });
  }
});
