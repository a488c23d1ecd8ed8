// What a page that goes mid-answer holds of it that the server may lack: its stream was lost
// (its web process may have died before saving what it sent, and no resumed stream has said
// how much the record keeps), or a hand-back of it had not been answered (generation.js,
// `piecesAtRisk`). Going, the page hands those pieces back in a request that outlives it, and
// keeps them in the tab's session storage, handed back on the tab's next load: a reload while
// the server cannot be reached, or more than such a request may carry. The server keeps only
// what it lacks (docs/api.md, recover), so a piece handed back twice is harmless.
import { ApiError } from "./api.js";
import { tabStorage } from "./tab_storage.js";

const KEY = "chatapp.piecesToHandBack";
// Browsers refuse keepalive requests whose bodies pass 64 KiB in all; room left for headers.
export const KEEPALIVE_MAX_BYTES = 60_000;

/**
 * @param {object} parts
 * @param {Storage} parts.storage  the tab's session storage
 * @param {(id: number, pieces: object[], options?: {keepalive?: boolean}) => Promise} parts.recover
 */
export function createKeptPieces({ storage, recover }) {
  function read() {
    try {
      const kept = JSON.parse(storage.getItem(KEY) ?? "{}");
      return kept !== null && typeof kept === "object" ? kept : {};
    } catch {
      return {}; // unreadable or blocked: nothing kept
    }
  }

  function write(kept) {
    try {
      if (Object.keys(kept).length === 0) storage.removeItem(KEY);
      else storage.setItem(KEY, JSON.stringify(kept));
    } catch {
      // Full or blocked: the request made as the page went is all there is.
    }
  }

  return {
    /** As the page goes: `answers`, `[{id, pieces}]`, each answer's pieces at risk. */
    leave(answers) {
      const kept = read();
      let room = KEEPALIVE_MAX_BYTES;
      for (const { id, pieces } of answers) {
        if (pieces.length === 0) continue;
        kept[id] = pieces;
        const bytes = new TextEncoder().encode(JSON.stringify({ pieces })).length;
        if (bytes > room) continue;
        room -= bytes;
        recover(id, pieces, { keepalive: true }).catch(() => {});
      }
      write(kept);
    },

    /**
     * Hands back what earlier loads of this tab kept. What the server could not be reached
     * for stays kept for the next load; what it refused (the answer ended otherwise, or is
     * not this user's) is forgotten.
     */
    async handBack() {
      const kept = read();
      const ids = Object.keys(kept);
      if (ids.length === 0) return;
      const unreached = {};
      await Promise.all(ids.map((id) => recover(Number(id), kept[id]).catch((error) => {
        if (!(error instanceof ApiError) || error.status >= 500) unreached[id] = kept[id];
      })));
      // Read again: a page of this tab may have gone meanwhile and kept more.
      const now = read();
      for (const id of ids) {
        if (now[id] === undefined || JSON.stringify(now[id]) !== JSON.stringify(kept[id])) continue;
        if (unreached[id]) continue;
        delete now[id];
      }
      write(now);
    },

    /** Forgets them all: not for the next person at this computer. */
    clear() {
      write({});
    },
  };
}

/**
 * This tab's kept pieces, left as each of its pages goes: `atRisk()` says what the page's
 * answers hold that their server may lack, `[{id, pieces}]`.
 */
export function keepPiecesAsThePageGoes({ recover, atRisk }) {
  const kept = createKeptPieces({ storage: tabStorage(), recover });
  addEventListener("pagehide", () => kept.leave(atRisk()));
  return kept;
}
