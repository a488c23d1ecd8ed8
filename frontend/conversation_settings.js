// A conversation's settings: the model picker in its heading and a small panel for the system
// prompt, temperature and top_p. The models and the bounds are the server's (GET /api/models);
// the server checks every value again and its refusal is shown as a sentence (errors.js).
// Before a conversation exists the choices wait here and go with its creation.
import { sentenceFor } from "./errors.js";

const GONE = " (not available now)";
const PICKER_HINT = "The model that writes this conversation's answers";
// Decimal notation only: Number() would also read "0x1" and "0b1".
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/i;

/**
 * A sampling field's value: empty is the default (null); otherwise a number within the bounds
 * ({min, max, min_excluded}), else `error` says what is allowed.
 */
export function parseSampling(text, bounds, label) {
  const trimmed = String(text).trim();
  if (trimmed === "") return { value: null, error: null };
  const value = DECIMAL.test(trimmed) ? Number(trimmed) : NaN;
  const above = bounds.min_excluded ? value > bounds.min : value >= bounds.min;
  if (!Number.isFinite(value) || !above || value > bounds.max) {
    const low = bounds.min_excluded ? `above ${bounds.min}` : `from ${bounds.min}`;
    return { value: null, error: `${label} must be a number ${low} to ${bounds.max}, or empty for the default.` };
  }
  return { value, error: null };
}

/** The model a new conversation starts with: the last one used if it is still served. */
export function startingModel({ models, default_model: defaultModel, last_used_model: lastUsed }) {
  const served = new Set(models.map((model) => model.id));
  if (lastUsed && served.has(lastUsed)) return lastUsed;
  if (served.has(defaultModel)) return defaultModel;
  return models[0]?.id ?? defaultModel;
}

/**
 * The picker's options: every model served, and the conversation's own if it has gone (said
 * only once the models are known: before they arrive, every model looks gone).
 */
export function modelOptions(models, current, isKnown = true) {
  const options = models.map((model) => ({ value: model.id, label: model.id }));
  if (current && !options.some((option) => option.value === current)) {
    options.push({ value: current, label: isKnown ? current + GONE : current });
  }
  return options;
}

const EMPTY_CATALOGUE = {
  models: [], default_model: "", last_used_model: null, max_system_prompt_chars: 0,
  sampling: { temperature: { min: 0, max: 2, default: null }, top_p: { min: 0, max: 1, min_excluded: true, default: null } },
};

/**
 * @param {object} parts
 * @param {object} parts.api the API of api.js (models, updateConversation)
 * @param {(error: Error) => void} parts.failed a failure that is not about a setting (401, network)
 * @param {(text: string) => void} parts.announce
 */
export function createConversationSettings({ api, failed, announce }) {
  const $ = (id) => document.getElementById(id);
  const picker = $("model-picker");
  const toggle = $("settings-toggle");
  const panel = $("settings-panel");
  const error = $("settings-error");
  const { system_prompt: systemPrompt, temperature, top_p: topP } = panel.elements;
  let catalogue = EMPTY_CATALOGUE;
  let conversation = null; // the open conversation, or null: a new one, whose choices wait in `draft`
  let draft = {};

  function showError(text) {
    error.textContent = text;
    error.hidden = !text;
  }

  function fill() {
    fillPicker();
    fillFields();
  }

  function fillPicker() {
    const current = conversation?.model ?? draft.model ?? startingModel(catalogue);
    picker.replaceChildren(...modelOptions(catalogue.models, current, catalogue !== EMPTY_CATALOGUE).map(({ value, label }) => {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = label;
      return option;
    }));
    picker.value = current;
    nameInTooltip();
  }

  // A name wider than the picker (a phone's, or a long one) is cut with an ellipsis: the tooltip
  // and the list of options still name it whole.
  function nameInTooltip() {
    const chosen = picker.selectedOptions[0]?.textContent;
    picker.title = chosen ? `${chosen}. ${PICKER_HINT}` : PICKER_HINT;
  }

  function fillFields() {
    const shown = conversation ?? draft;
    systemPrompt.value = shown.system_prompt ?? "";
    temperature.value = shown.temperature ?? "";
    topP.value = shown.top_p ?? "";
    const { sampling } = catalogue;
    temperature.placeholder = `default ${sampling.temperature.default ?? ""}`.trim();
    topP.placeholder = `default ${sampling.top_p.default ?? ""}`.trim();
  }

  /** Stores `changes` on the open conversation (or in the draft); true when they were taken. */
  async function apply(changes) {
    showError("");
    if (conversation === null) {
      draft = { ...draft, ...changes };
      return true;
    }
    const { id } = conversation;
    // The user may open another conversation before the server answers: the answer is about this
    // one, and the panel, which shows the other by then, is left alone.
    const isStillShown = () => conversation?.id === id;
    let taken = false;
    try {
      const updated = await api.updateConversation(id, changes);
      if (isStillShown()) conversation = updated;
      taken = true;
      return true;
    } catch (refusal) {
      if ((refusal.status === 400 || refusal.status === 404) && isStillShown()) showError(sentenceFor(refusal));
      else failed(refusal);
      return false;
    } finally {
      // The picker shows the stored model, taken or not. The fields show what was stored only
      // when these changes were theirs and taken: words still being written there (a model
      // picked meanwhile), or refused (to be mended), stay as the user left them.
      if (isStillShown()) {
        fillPicker();
        if (taken && Object.keys(changes).some((key) => key !== "model")) fillFields();
      }
    }
  }

  picker.addEventListener("change", async () => {
    nameInTooltip();
    if (await apply({ model: picker.value })) announce(`Answers now come from ${picker.value}.`);
  });

  toggle.addEventListener("click", () => {
    panel.hidden = !panel.hidden;
    toggle.setAttribute("aria-expanded", String(!panel.hidden));
    if (!panel.hidden) systemPrompt.focus();
  });

  panel.addEventListener("submit", async (event) => {
    event.preventDefault();
    const { sampling } = catalogue;
    const parsedTemperature = parseSampling(temperature.value, sampling.temperature, "Temperature");
    const parsedTopP = parseSampling(topP.value, sampling.top_p, "Top p");
    // Counted as the server counts: a paste past the limit is refused whole, not cut to it.
    const chars = [...systemPrompt.value].length;
    const maxChars = catalogue.max_system_prompt_chars;
    const tooLong = maxChars && chars > maxChars
      ? `The system prompt holds at most ${maxChars.toLocaleString("en")} characters; `
        + `this one has ${chars.toLocaleString("en")}.`
      : null;
    const problem = tooLong ?? parsedTemperature.error ?? parsedTopP.error;
    if (problem) return showError(problem);
    // Only what differs from what the panel was filled with: a setting saved meanwhile in
    // another tab stays, unless this one changes it too.
    const shown = conversation ?? draft;
    const filled = { system_prompt: shown.system_prompt ?? "", temperature: shown.temperature ?? null,
      top_p: shown.top_p ?? null };
    const asked = { system_prompt: systemPrompt.value, temperature: parsedTemperature.value,
      top_p: parsedTopP.value };
    const changes = Object.fromEntries(Object.entries(asked).filter(([key, value]) => value !== filled[key]));
    if (Object.keys(changes).length === 0 || await apply(changes)) {
      announce("Settings saved. They apply from the next answer.");
    }
  });

  return {
    /** Reads the models and bounds again (at sign-in); a failure leaves the picker as it was. */
    async load() {
      try {
        catalogue = await api.models();
      } catch (refusal) {
        failed(refusal);
      }
      fill();
    },
    /** The conversation on screen (null: a new one, not yet created). */
    show(shown) {
      conversation = shown;
      draft = {}; // a new conversation's start afresh; a created one took them
      showError("");
      fill();
    },
    /** What a new conversation is created with: the choices made before it existed, kept until
     * it is shown (a creation that failed takes them again). */
    forNewConversation() {
      return { model: picker.value || undefined, ...draft };
    },
    /** An answer came from `model`: a new conversation starts with it from now on. */
    used(model) {
      if (model) catalogue = { ...catalogue, last_used_model: model };
    },
  };
}
