/**
 * The one entry to @peculiar/x509: its v2 needs the reflect-metadata
 * polyfill evaluated first, and a WebCrypto provider set.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";

x509.cryptoProvider.set(crypto);

export * from "@peculiar/x509";
