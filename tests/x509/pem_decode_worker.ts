/** Decodes the PEM text it is sent and answers with the block count or the error: pem_test.ts bounds its time. */
import { decodePemBlocks } from "../../src/x509/pem.ts";

/** The worker's global scope, as far as this module uses it (the project's types are Window's). */
const scope = self as unknown as {
  onmessage: (event: MessageEvent<string>) => void;
  postMessage(message: string): void;
};

scope.onmessage = (event) => {
  try {
    scope.postMessage(`${decodePemBlocks(event.data).length} block(s)`);
  } catch (error) {
    scope.postMessage((error as Error).message);
  }
};
