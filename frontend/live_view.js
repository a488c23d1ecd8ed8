// The staff's live view (staff/live/, chatapp/staff/live_view.py): the answers streaming now and each
// inference replica's load, redrawn from each `live` event, with a Stop for every answer.
import { api } from "./api.js";
import { arrangeChildren } from "./child_order.js";
import { FIRST_RETRY_MS, nextRetryMs } from "./reconnect.js";

const EVENTS_URL = "/api/staff/live/events";

function cell(text, className = "") {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

const number = (value) => (value === null || value === undefined ? "–" : String(value));
const percent = (share) => (share === null || share === undefined ? "–" : `${(share * 100).toFixed(1)}%`);

function stopButton(generationId) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = "Stop";
  button.addEventListener("click", async () => {
    button.dataset.asked = "true"; // the view's redraws leave it as it is from now on
    button.disabled = true;
    button.textContent = "Stopping…";
    try {
      await api.staffStop(generationId);
    } catch (error) {
      // Not taken: the answer goes on, and the Stop may be pressed again.
      delete button.dataset.asked;
      button.disabled = false;
      button.textContent = `Stop failed: ${error.message}. Stop again`;
    }
  });
  return button;
}

/** A stream's row, made once and then kept: each redraw writes its cells in place. */
function streamRow(stream) {
  const row = document.createElement("tr");
  row.dataset.generationId = String(stream.generation_id);
  row.append(cell(""), cell(""), cell(""), cell("", "number"), cell("", "number"), cell(""));
  const action = document.createElement("td");
  if (document.body.dataset.mayStop === "true") action.append(stopButton(stream.generation_id));
  row.append(action);
  return row;
}

function fillStreamRow(row, stream) {
  const conversation = `#${stream.conversation_id} ${stream.conversation_title}`.trim();
  const texts = [stream.username, conversation, stream.model, stream.age_s.toFixed(0),
    String(stream.chars_so_far), stream.status.replace("_", " ")];
  texts.forEach((text, i) => {
    if (row.cells[i].textContent !== text) row.cells[i].textContent = text;
  });
  const button = row.querySelector("button");
  if (button && !button.dataset.asked) button.disabled = stream.status !== "streaming";
}

function replicaRow(replica) {
  const row = document.createElement("tr");
  if (!replica.reachable) {
    row.append(cell(replica.url), cell(`unreachable: ${replica.error}`));
    row.lastChild.colSpan = 3;
    return row;
  }
  row.append(cell(replica.url), cell(number(replica.running), "number"),
    cell(number(replica.waiting), "number"), cell(percent(replica.cache_usage), "number"));
  return row;
}

/** Redraws both tables; the streams' rows are kept, with their buttons and the focus on one. */
function show({ streams, replicas }) {
  const body = document.querySelector("#streams tbody");
  const shown = new Map([...body.rows].map((row) => [row.dataset.generationId, row]));
  arrangeChildren(body, streams.map((stream) => {
    const row = shown.get(String(stream.generation_id)) ?? streamRow(stream);
    fillStreamRow(row, stream);
    return row;
  }));
  document.getElementById("no-streams").hidden = streams.length > 0;
  document.querySelector("#replicas tbody").replaceChildren(...replicas.map(replicaRow));
}

function follow(retryMs = FIRST_RETRY_MS) {
  const status = document.getElementById("connection");
  const source = new EventSource(EVENTS_URL);
  source.addEventListener("live", (event) => {
    retryMs = FIRST_RETRY_MS;
    status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    show(JSON.parse(event.data));
  });
  source.addEventListener("error", () => {
    status.textContent = "Connection lost; reconnecting…";
    // EventSource reconnects by itself, but gives up for good on an answer other than 200 (a
    // web process restarting behind nginx, the database down): then a new one, later.
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(() => follow(nextRetryMs(retryMs)), retryMs);
    }
  });
}

follow();
