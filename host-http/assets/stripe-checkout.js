// The Stripe payment page's script: mounts Stripe.js's card element (the card number is typed
// into Stripe's element and never reaches this site), turns the card into a Stripe token,
// posts the token with the customer's fields to this site, and runs 3-D Secure in Stripe.js
// when the payment needs it. Whether a payment succeeded is decided by the server, which asks
// Stripe, never by this script.
'use strict';
(function () {
  var form = document.getElementById('stripe-form');
  if (!form) {
    return;
  }
  var status = document.getElementById('stripe-status');
  var button = form.querySelector('button[type="submit"]');
  var say = function (text) {
    status.textContent = text || '';
  };
  if (typeof Stripe !== 'function') {
    say(form.dataset.noScript);
    button.disabled = true;
    return;
  }
  var stripe = Stripe(form.dataset.publishableKey);
  var card = stripe.elements().create('card');
  card.mount('#card-element');

  var fieldsOf = function () {
    var fields = {};
    new FormData(form).forEach(function (value, key) {
      fields[key] = value;
    });
    return fields;
  };
  var post = function (url, fields) {
    var body = new URLSearchParams();
    Object.keys(fields).forEach(function (key) {
      body.append(key, fields[key]);
    });
    return fetch(url, {
      method: 'POST',
      body: body,
      credentials: 'same-origin',
      headers: { Accept: 'application/json' }
    }).then(function (response) {
      return response.json();
    });
  };
  var finish = function (answer) {
    if (answer && answer.next) {
      window.location.assign(answer.next);
      return;
    }
    say((answer && answer.message) || form.dataset.failed);
    button.disabled = false;
  };

  form.addEventListener('submit', function (event) {
    event.preventDefault();
    button.disabled = true;
    say(form.dataset.working);
    var fields = fieldsOf();
    var tokenized;
    try {
      tokenized = stripe.createToken(card);
    } catch (error) {
      finish({ message: form.dataset.incomplete });
      return;
    }
    Promise.resolve(tokenized)
      .then(function (result) {
        if (!result || result.error || !result.token) {
          finish({
            message: (result && result.error && result.error.message !== 'Bad request' &&
              result.error.message) || form.dataset.incomplete
          });
          return null;
        }
        fields.stripe_token = result.token.id;
        return post(form.action, fields);
      })
      .then(function (answer) {
        if (!answer) {
          return;
        }
        if (answer.outcome !== 'requires_action') {
          finish(answer);
          return;
        }
        say(form.dataset.authenticating);
        // Its result is not trusted: the server retrieves the intent from Stripe.
        return Promise.resolve()
          .then(function () {
            return stripe.confirmCardPayment(answer.clientSecret);
          })
          .catch(function () {
            return null;
          })
          .then(function () {
            return post(form.dataset.confirmUrl, {
              form_token: fields.form_token,
              intent: answer.intent
            });
          })
          .then(finish);
      })
      .catch(function () {
        finish({ message: form.dataset.failed });
      });
  });
})();
