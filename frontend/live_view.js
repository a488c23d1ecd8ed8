// The staff's live view (staff/live/, chatapp/staff/live_view.py): the answers streaming now and each
// inference replica's load, redrawn from each `live` event, with a Stop for every answer.
import { api } from "./api.js";

const EVENTS_URL = "/api/staff/live/events";

function cell(text, className = "") {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

const number = (value) => (value === null || value === undefined ? "–" : String(value));
const percent = (share) => (share === null || share === undefined ? "–" : `${(share * 100).toFixed(1)}%`);

function stopButton(stream) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = "Stop";
  button.disabled = stream.status !== "streaming";
  button.addEventListener("click", async () => {
    button.disabled = true;
    button.textContent = "Stopping…";
    try {
      await api.staffStop(stream.generation_id);
    } catch (error) {
      button.textContent = `Stop failed: ${error.message}`;
    }
  });
  return button;
}

function streamRow(stream) {
  const row = document.createElement("tr");
  row.dataset.generationId = String(stream.generation_id);
  const conversation = `#${stream.conversation_id} ${stream.conversation_title}`.trim();
  row.append(cell(stream.username), cell(conversation), cell(stream.age_s.toFixed(0), "number"),
    cell(String(stream.chars_so_far), "number"), cell(stream.status.replace("_", " ")));
  const action = document.createElement("td");
  action.append(stopButton(stream));
  row.append(action);
  return row;
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

/** Redraws both tables; a row whose Stop is on its way keeps its button as it is. */
function show({ streams, replicas }) {
  const body = document.querySelector("#streams tbody");
  const pending = new Map([...body.querySelectorAll("tr")]
    .filter((row) => row.querySelector("button")?.disabled)
    .map((row) => [row.dataset.generationId, row.querySelector("td:last-child button")]));
  body.replaceChildren(...streams.map((stream) => {
    const row = streamRow(stream);
    const kept = pending.get(row.dataset.generationId);
    if (kept) row.lastChild.replaceChildren(kept);
    return row;
  }));
  document.getElementById("no-streams").hidden = streams.length > 0;
  document.querySelector("#replicas tbody").replaceChildren(...replicas.map(replicaRow));
}

function follow() {
  const status = document.getElementById("connection");
  const source = new EventSource(EVENTS_URL);
  source.addEventListener("live", (event) => {
    status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    show(JSON.parse(event.data));
  });
  // EventSource reconnects by itself; say so meanwhile.
  source.addEventListener("error", () => { status.textContent = "Connection lost; reconnecting…"; });
}

follow();
