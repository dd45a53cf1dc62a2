/**
 * JoiningNode records for the node operator, which annotates a new node
 * with the components it installed and deletes the record afterwards.
 *
 * Workers are applied (server-side apply) under their own name; a control
 * plane is recorded as the single object {@linkcode CONTROL_PLANE_JOINING_NODE_NAME},
 * so control planes join one at a time, as in the original. That name is
 * therefore reserved: no worker may take it.
 *
 * @module
 */
import type { Clock } from "../clock.ts";
import type { CustomResource, KubernetesClient } from "../kubernetes/client.ts";
import { KubernetesError } from "../kubernetes/errors.ts";
import type { Logger } from "../log/logger.ts";
import { rfc3339 } from "../rfc3339.ts";
import type { JoiningNode, JoiningNodes } from "./dependencies.ts";
import { apiServerCall, reject } from "./rejections.ts";

/** The JoiningNode resource. */
export const JOINING_NODES = {
  group: "update.edgeless.systems",
  version: "v1alpha1",
  plural: "joiningnodes",
};
/** Name of the one JoiningNode of a joining control plane; reserved, no worker node may have it. */
export const CONTROL_PLANE_JOINING_NODE_NAME = "control-plane";
/** How long a JoiningNode is meant to live. */
export const JOINING_NODE_DEADLINE_MS = { worker: 48 * 3600_000, controlPlane: 10 * 60_000 };
/** The field manager of the join service's server-side applies. */
const FIELD_MANAGER = "join-service";

/**
 * The join service's JoiningNode records. A control-plane record whose
 * deadline has passed is stale (its node never finished) and is replaced;
 * the same node asking again (its first answer was lost) may record itself
 * again.
 */
export function joiningNodes(
  options: { client: KubernetesClient; clock: Clock; logger: Logger },
): JoiningNodes {
  const { client, clock, logger } = options;
  const resource = (name: string, node: JoiningNode, deadlineMs: number) => ({
    kind: "JoiningNode",
    metadata: { name },
    spec: {
      name: node.name,
      componentsreference: node.componentsReference,
      iscontrolplane: node.isControlPlane,
      deadline: rfc3339(clock.now() + deadlineMs),
    },
  });
  return {
    record(node, { signal }) {
      return apiServerCall(async () => {
        if (!node.isControlPlane) {
          const worker = resource(node.name, node, JOINING_NODE_DEADLINE_MS.worker);
          await client.applyCustomResource(JOINING_NODES, worker, { fieldManager: FIELD_MANAGER, signal });
          return { node };
        }
        const record = resource(CONTROL_PLANE_JOINING_NODE_NAME, node, JOINING_NODE_DEADLINE_MS.controlPlane);
        // Two rounds: a stale record another replica replaced or removed between our read and our delete
        // is looked at once more, not deleted blindly (that would drop the other replica's fresh record).
        for (let round = 1;; round++) {
          try {
            const created = await client.createCustomResource(JOINING_NODES, record, { signal });
            return { node, uid: created.metadata?.uid };
          } catch (error) {
            if (!(error instanceof KubernetesError && error.reason === "AlreadyExists")) throw error;
          }
          const existing = await client.getCustomResource<
            CustomResource<{ name?: string; deadline?: string }>
          >(
            JOINING_NODES,
            CONTROL_PLANE_JOINING_NODE_NAME,
            { signal },
          ).catch((error) => {
            if (error instanceof KubernetesError && error.reason === "NotFound") return undefined;
            throw error;
          });
          const holder = existing?.spec?.name ?? "";
          const deadline = existing?.spec?.deadline ?? "";
          // In the second round, any record is another attempt's, made since our first look: it holds.
          if (round > 1 || existing && Date.parse(deadline) > clock.now() && holder !== node.name) {
            const who = existing
              ? `control-plane node ${JSON.stringify(holder)} is joining until ${deadline}`
              : "another control plane's JoiningNode changed meanwhile";
            throw reject("control-plane-busy", `${who}; control planes join one at a time, retry later`);
          }
          if (!existing) continue;
          if (holder !== node.name) {
            logger.warn("replacing stale control-plane JoiningNode", { previous: holder });
          }
          try {
            await client.deleteCustomResource(JOINING_NODES, CONTROL_PLANE_JOINING_NODE_NAME, {
              uid: existing.metadata?.uid,
              signal,
            });
          } catch (error) {
            const replaced = error instanceof KubernetesError &&
              (error.reason === "NotFound" || error.reason === "Conflict");
            if (!replaced) throw error;
          }
        }
      });
    },
    release({ node, uid }, { signal }) {
      if (!node.isControlPlane || uid === undefined) return Promise.resolve();
      return apiServerCall(async () => {
        try {
          await client.deleteCustomResource(JOINING_NODES, CONTROL_PLANE_JOINING_NODE_NAME, { uid, signal });
        } catch (error) {
          // Gone (deleted, expired) or replaced by a newer attempt: nothing of this record is left.
          const done = error instanceof KubernetesError &&
            (error.reason === "NotFound" || error.reason === "Conflict");
          if (!done) throw error;
        }
      });
    },
  };
}
