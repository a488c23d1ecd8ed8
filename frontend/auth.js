// Signing in and out: the login form, the session check at start, the logout button.
import { api, ApiError } from "./api.js";

const describe = (error) =>
  error instanceof ApiError ? error.message : `Could not reach the server (${error.message}).`;

/**
 * @param {object} hooks
 * @param {(user: object) => void} hooks.signedIn the app view is shown; fill it
 * @param {() => void} hooks.leaving before the sign-in form replaces the app (stop, clear)
 */
export function createAuth({ signedIn, leaving }) {
  const loginView = document.getElementById("login-view");
  const form = document.getElementById("login-form");
  const error = document.getElementById("login-error");
  const appView = document.getElementById("app-view");
  const { username, password } = form.elements;

  function showLogin(message = "") {
    leaving();
    appView.hidden = true;
    loginView.hidden = false;
    error.textContent = message;
    error.hidden = !message;
    username.focus();
  }

  function showApp(user) {
    loginView.hidden = true;
    appView.hidden = false;
    document.getElementById("user-name").textContent = user.username;
    signedIn(user);
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      const { user } = await api.login(username.value, password.value);
      password.value = "";
      showApp(user);
    } catch (failure) {
      error.textContent = describe(failure);
      error.hidden = false;
      password.focus();
      password.select();
    } finally {
      submit.disabled = false;
    }
  });

  document.getElementById("logout").addEventListener("click", async () => {
    leaving();
    try {
      await api.logout();
    } catch {
      // Signed out or not, this browser shows the sign-in form next.
    }
    showLogin();
  });

  return {
    showLogin,
    describe,
    /** Asks the server who we are (which also sets the CSRF cookie), then shows a view. */
    start: () => api.session().then(
      ({ user }) => (user ? showApp(user) : showLogin()),
      (failure) => showLogin(describe(failure)),
    ),
  };
}
