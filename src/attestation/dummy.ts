/**
 * The `dummy` variant: development only, no security at all.
 *
 * Its document is `{"variant":"dummy","reportData":"<base64>"}`; the
 * validator checks only that the report data matches. Anyone can forge it.
 * It is never a default: a component uses it only when explicitly told to,
 * and then warns loudly at start and on every verification.
 *
 * @module
 */
import { bytesEqual } from "../bytes/equal.ts";
import {
  AttestationError,
  type Issuer,
  REPORT_DATA_LENGTH,
  type Validator,
  type Verification,
} from "./attestation.ts";
import type { Logger } from "../log/logger.ts";

/** Variant name. */
export const DUMMY_VARIANT = "dummy";

const WARNING =
  "INSECURE: attestation variant 'dummy' accepts forged evidence; never use it outside development";

/** Issues dummy evidence. */
export class DummyIssuer implements Issuer {
  readonly variant: string = DUMMY_VARIANT;

  /** An issuer that warns through `logger` that it is insecure. */
  constructor(logger: Logger) {
    logger.warn(WARNING, { variant: DUMMY_VARIANT });
  }

  issue(reportData: Uint8Array): Promise<Uint8Array> {
    if (reportData.length !== REPORT_DATA_LENGTH) {
      return Promise.reject(
        new Error(`report data must be ${REPORT_DATA_LENGTH} bytes, got ${reportData.length}`),
      );
    }
    const doc = { variant: DUMMY_VARIANT, reportData: btoa(String.fromCharCode(...reportData)) };
    return Promise.resolve(new TextEncoder().encode(JSON.stringify(doc)));
  }
}

/** Validates dummy evidence: report data only. */
export class DummyValidator implements Validator {
  readonly variant: string = DUMMY_VARIANT;
  readonly #logger: Logger;

  /** A validator that warns through `logger` that it is insecure, at construction and on every use. */
  constructor(logger: Logger) {
    this.#logger = logger;
    logger.warn(WARNING, { variant: DUMMY_VARIANT });
  }

  validate(document: Uint8Array, reportData: Uint8Array): Promise<Verification> {
    this.#logger.warn(WARNING, { variant: DUMMY_VARIANT, event: "verification" });
    let reported: Uint8Array;
    try {
      const doc = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(document));
      if (doc?.variant !== DUMMY_VARIANT || typeof doc.reportData !== "string") {
        throw new Error("not a dummy document");
      }
      reported = Uint8Array.from(atob(doc.reportData), (c) => c.charCodeAt(0));
    } catch {
      return Promise.reject(
        new AttestationError(
          "malformed",
          'malformed dummy document: want {"variant":"dummy","reportData":"<base64>"}',
        ),
      );
    }
    if (!bytesEqual(reported, reportData)) {
      return Promise.reject(
        new AttestationError(
          "report-data-mismatch",
          "report data in the evidence does not match this request",
        ),
      );
    }
    return Promise.resolve({ variant: DUMMY_VARIANT, warnings: [], measurements: {} });
  }
}
