#!/bin/sh
# notes.sh — a shell app on browser-login (docs/apps/shell.md): signs in
# through the browser when it must, adds a note to the demo API, lists the
# notes. The session never reaches the script: the broker adds the token to
# each request.
#
# Usage: notes.sh [--account ACCOUNT] [TEXT...]
#        notes.sh --accounts
#        notes.sh --use ACCOUNT [TEXT...]
#        notes.sh --add-account [--login-hint ADDRESS] [TEXT...]
# The account switcher (a client whose file says Accounts=multiple):
# --accounts lists the client's accounts, the current one marked; --use
# makes ACCOUNT (a key that --accounts lists) current; --add-account signs
# one more account in, ADDRESS filled in on the page, and makes it current;
# --account writes and reads the notes as ACCOUNT, current or not.
# Environment: CLIENT (default com.example.notes), BROWSER_LOGIN_SOCKET
# (default $XDG_RUNTIME_DIR/browser-login/broker.sock).
set -u
client=${CLIENT:-com.example.notes}
account= add= hint=
errors=$(mktemp) || exit 70
trap 'rm -f "$errors"' EXIT

usage() {
    echo "usage: notes.sh [--account ACCOUNT | --use ACCOUNT | --add-account [--login-hint ADDRESS]] [TEXT...]" >&2
    echo "       notes.sh --accounts" >&2
    exit 64
}

# The error code of the last command run with --json (its stderr is in $errors).
error_code() { sed -n 's/.*"code":"\([^"]*\)".*/\1/p' "$errors"; }

while [ $# -gt 0 ]; do
    case $1 in
        --accounts) [ $# -eq 1 ] || usage; browser-login accounts "$client"; exit ;;
        --use) [ $# -ge 2 ] || usage; browser-login use "$client" "$2" >/dev/null || exit $?; shift 2 ;;
        --account) [ $# -ge 2 ] || usage; account=$2; shift 2 ;;
        --add-account) add=1; shift ;;
        --login-hint) [ $# -ge 2 ] && [ -n "$add" ] || usage; hint=$2; shift 2 ;;
        --) shift; break ;;
        -*) usage ;;
        *) break ;;
    esac
done

# Signed in? `session` exits 0 only then. A named account is used as it is.
if [ -n "$add" ] || { [ -z "$account" ] && ! browser-login session "$client" >/dev/null; }; then
    echo "signing in to $client: finish in your browser" >&2
    browser-login start "$client" ${add:+--add-account} ${hint:+--login-hint "$hint"} \
        --wait --timeout 300 --json >/dev/null 2>"$errors"
    status=$?
    case $status in
        0) ;;
        75) echo "not signed in after 5 minutes; run me again when you have" >&2; exit 75 ;;
        *) echo "no sign-in: $(error_code)" >&2; exit "$status" ;;
    esac
fi

# The API's answer is the body, on standard output.
me=$(browser-login request "$client" GET /api/me ${account:+--account "$account"}) || exit $?
email=$(printf '%s' "$me" | sed -n 's/.*"email":"\([^"]*\)".*/\1/p')
echo "signed in as $email"

# A note: the text as a JSON string, sent from standard input.
if [ $# -gt 0 ]; then
    text=$(printf '%s' "$*" | sed 's/\\/\\\\/g; s/"/\\"/g')
    printf '{"text": "%s"}' "$text" |
        browser-login request "$client" POST /api/notes -d @- ${account:+--account "$account"} \
            --json >/dev/null 2>"$errors"
    status=$?
    case $status in
        0) ;;
        22) echo "the API refused the note" >&2; exit 1 ;;
        *) echo "cannot add the note: $(error_code)" >&2; exit "$status" ;;
    esac
fi

# Each note's text, one a line (its JSON string unescaped: \" and \\).
browser-login request "$client" GET /api/notes ${account:+--account "$account"} |
    grep -o '"text":"\([^"\\]\|\\.\)*"' |
    sed 's/^"text":"//; s/"$//; s/\\"/"/g; s/\\\\/\\/g; s/^/- /'
