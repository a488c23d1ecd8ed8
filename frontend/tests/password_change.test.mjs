import assert from "node:assert/strict";
import { test } from "node:test";

import { ApiError } from "../api.js";
import { formProblem, refusalProblem } from "../password_change.js";

const refusal = (status, code, details) => Object.assign(new ApiError(status, code, "developer words"), { details });

test("a form with every field filled and the new password typed the same twice is sent", () => {
  assert.equal(formProblem({ oldPassword: "old one", newPassword: "new one", repeated: "new one" }), null);
});

test("an empty field is named, the current password first", () => {
  assert.equal(formProblem({ oldPassword: "", newPassword: "", repeated: "" }).field, "old_password");
  assert.deepEqual(formProblem({ oldPassword: "old one", newPassword: "", repeated: "" }),
    { field: "new_password", sentence: "Type a new password." });
});

test("a new password typed differently the second time is asked again, before anything is sent", () => {
  const problem = formProblem({ oldPassword: "old one", newPassword: "new one", repeated: "new on" });
  assert.equal(problem.field, "repeated");
  assert.match(problem.sentence, /differ/);
});

test("a wrong current password puts the focus back on it", () => {
  assert.deepEqual(refusalProblem(refusal(400, "wrong_password")),
    { field: "old_password", sentence: "That is not your current password. Please try again." });
});

test("a new password the validators refuse is shown with their reasons, on the new password's field", () => {
  const problem = refusalProblem(refusal(400, "invalid_password",
    ["This password is too short. It must contain at least 8 characters.", "This password is too common."]));
  assert.equal(problem.field, "new_password");
  assert.equal(problem.sentence, "That new password can't be used. "
    + "This password is too short. It must contain at least 8 characters. This password is too common.");
  assert.ok(!problem.sentence.includes("developer words"));
});

test("a refusal about no one field, as too many wrong guesses, moves the focus nowhere", () => {
  const held = refusal(429, "too_many_attempts");
  held.retryAfter = 300;
  assert.deepEqual(refusalProblem(held), { field: null,
    sentence: "Too many failed sign-ins. Please wait 300 seconds and try again." });
  assert.equal(refusalProblem(new TypeError("Failed to fetch")).field, null);
});
