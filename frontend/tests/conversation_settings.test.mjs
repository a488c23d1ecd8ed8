import assert from "node:assert/strict";
import { test } from "node:test";

import { modelOptions, parseSampling, startingModel } from "../conversation_settings.js";

const TEMPERATURE = { min: 0, max: 2, min_excluded: false, default: 0.7 };
const TOP_P = { min: 0, max: 1, min_excluded: true, default: 0.9 };

test("an empty sampling field is the default, and a number within the bounds is taken", () => {
  assert.deepEqual(parseSampling("", TEMPERATURE, "Temperature"), { value: null, error: null });
  assert.deepEqual(parseSampling("  ", TEMPERATURE, "Temperature"), { value: null, error: null });
  assert.deepEqual(parseSampling("0", TEMPERATURE, "Temperature"), { value: 0, error: null });
  assert.deepEqual(parseSampling("2", TEMPERATURE, "Temperature"), { value: 2, error: null });
  assert.deepEqual(parseSampling("0.25", TOP_P, "Top p"), { value: 0.25, error: null });
});

test("a value beyond the bounds, or no number at all, is refused with what is allowed", () => {
  for (const text of ["-0.1", "2.01", "NaN", "Infinity", "1e400", "warm", "0x1"]) {
    const { value, error } = parseSampling(text, TEMPERATURE, "Temperature");
    assert.equal(value, null, text);
    assert.equal(error, "Temperature must be a number from 0 to 2, or empty for the default.", text);
  }
  assert.equal(parseSampling("0", TOP_P, "Top p").error, "Top p must be a number above 0 to 1, or empty for the default.");
  assert.ok(parseSampling("1.5", TOP_P, "Top p").error);
});

test("a new conversation starts with the last model used while it is served, else the default", () => {
  const models = [{ id: "small" }, { id: "large" }];
  assert.equal(startingModel({ models, default_model: "small", last_used_model: "large" }), "large");
  assert.equal(startingModel({ models, default_model: "small", last_used_model: "retired" }), "small");
  assert.equal(startingModel({ models, default_model: "small", last_used_model: null }), "small");
  assert.equal(startingModel({ models, default_model: "gone", last_used_model: null }), "small");
});

test("a conversation's model that is no longer served stays in the picker, marked as such", () => {
  const models = [{ id: "small" }, { id: "large" }];
  assert.deepEqual(modelOptions(models, "large").map((o) => o.label), ["small", "large"]);
  assert.deepEqual(modelOptions(models, "retired").map((o) => o.label),
    ["small", "large", "retired (not available now)"]);
  assert.equal(modelOptions(models, "retired").at(-1).value, "retired");
});

test("before the models are known, the conversation's model is not called gone", () => {
  assert.deepEqual(modelOptions([], "large", false), [{ value: "large", label: "large" }]);
});
