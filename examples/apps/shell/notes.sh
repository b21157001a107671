#!/bin/sh
# notes.sh — a shell app on browser-login (docs/apps/shell.md): signs in
# through the browser when it must, adds a note to the demo API, lists the
# notes. The session never reaches the script: the broker adds the token to
# each request.
#
# Usage: notes.sh [TEXT...]
# Environment: CLIENT (default com.example.notes), BROWSER_LOGIN_SOCKET
# (default $XDG_RUNTIME_DIR/browser-login/broker.sock).
set -u
client=${CLIENT:-com.example.notes}
errors=$(mktemp) || exit 70
trap 'rm -f "$errors"' EXIT

# The error code of the last command run with --json (its stderr is in $errors).
error_code() { sed -n 's/.*"code":"\([^"]*\)".*/\1/p' "$errors"; }

# Signed in? `session` exits 0 only then.
if ! browser-login session "$client" >/dev/null; then
    echo "signing in to $client: finish in your browser" >&2
    browser-login start "$client" --wait --timeout 300 --json >/dev/null 2>"$errors"
    status=$?
    case $status in
        0) ;;
        75) echo "not signed in after 5 minutes; run me again when you have" >&2; exit 75 ;;
        *) echo "no sign-in: $(error_code)" >&2; exit "$status" ;;
    esac
fi

# The API's answer is the body, on standard output.
me=$(browser-login request "$client" GET /api/me) || exit $?
email=$(printf '%s' "$me" | sed -n 's/.*"email":"\([^"]*\)".*/\1/p')
echo "signed in as $email"

# A note: the text as a JSON string, sent from standard input.
if [ $# -gt 0 ]; then
    text=$(printf '%s' "$*" | sed 's/\\/\\\\/g; s/"/\\"/g')
    printf '{"text": "%s"}' "$text" |
        browser-login request "$client" POST /api/notes -d @- --json >/dev/null 2>"$errors"
    status=$?
    case $status in
        0) ;;
        22) echo "the API refused the note" >&2; exit 1 ;;
        *) echo "cannot add the note: $(error_code)" >&2; exit "$status" ;;
    esac
fi

# Each note's text, one a line (its JSON string unescaped: \" and \\).
browser-login request "$client" GET /api/notes |
    grep -o '"text":"\([^"\\]\|\\.\)*"' |
    sed 's/^"text":"//; s/"$//; s/\\"/"/g; s/\\\\/\\/g; s/^/- /'
