# fish completion for browser-login(1): commands, options, client ids (from
# `browser-login clients --json`) and attempt ids (from `browser-login status
# --json`), account keys (from `browser-login accounts CLIENT --json`). Installed as share/fish/vendor_completions.d/browser-login.fish.

set -l commands status start finish cancel resume acknowledge session sign-out accounts use request clients watch install-handler doctor vault help

# The broker's client ids, or attempt ids ($argv[1]: client, attempt or all-attempts).
function __browser_login_ids
    set -l cmd browser-login
    set -l tokens (commandline -opc)
    set -l i (contains -i -- --socket $tokens)
    and set -a cmd --socket $tokens[(math $i + 1)]
    switch $argv[1]
        case client
            $cmd clients --json 2>/dev/null | string match -ar '"id":"[^"]*"' | string split -f4 '"'
        case attempt
            $cmd status --json --no-reconcile 2>/dev/null | string match -ar '"attemptId":"[^"]*"' | string split -f4 '"'
        case all-attempts
            $cmd status --json --no-reconcile --all 2>/dev/null | string match -ar '"attemptId":"[^"]*"' | string split -f4 '"'
        case account
            # The client: the first argument after the command.
            set -l client
            set -l skip 0
            for token in $tokens[3..-1]
                if test $skip = 1
                    set skip 0
                    continue
                end
                switch $token
                    case --socket --client --scheme --timeout -d --data -H --header --account --login-hint
                        set skip 1
                    case '-*'
                    case '*'
                        set client $token
                        break
                end
            end
            test -n "$client"
            and $cmd accounts $client --json 2>/dev/null | string match -ar '"accountKey":"[^"]*"' | string split -f4 '"'
    end
end

# How many arguments follow the command (options and their values left out).
function __browser_login_position
    set -l tokens (commandline -opc)
    set -l count 0
    set -l skip 0
    set -l seen 0
    for token in $tokens[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        switch $token
            case --socket --client --scheme --timeout -d --data -H --header --account --login-hint
                set skip 1
            case '-*'
            case '*'
                set count (math $count + 1)
        end
    end
    echo (math $count - 1)
end

complete -c browser-login -f
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -l socket -r -F -d "the broker's socket"
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -l version -d 'print the version'
complete -c browser-login -l json -d 'print answers and errors as JSON'
complete -c browser-login -s h -l help -d 'show the help'

complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a status -d 'show login attempts that need attention'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a start -d 'sign a client in through the browser'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a finish -d 'deliver a callback URL to the broker'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a cancel -d 'cancel a login attempt'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a resume -d 'reopen the browser for a waiting attempt'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a acknowledge -d 'clear a finished or reconciled attempt'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a session -d "show a client's session"
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a sign-out -d 'sign a client out'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a accounts -d "list a client's accounts"
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a use -d "make one of a client's accounts the current one"
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a request -d "call the client's API with its session"
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a clients -d 'list the configured clients'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a watch -d 'stream session and attempt changes'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a install-handler -d 'register the URL handler'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a doctor -d 'check the broker, the desktop and the servers'
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a vault -d "seal the file vault's key, unlock it"
complete -c browser-login -n "not __fish_seen_subcommand_from $commands" -a help -d 'the list of commands'

complete -c browser-login -n "__fish_seen_subcommand_from status" -l all -d 'every attempt'
complete -c browser-login -n "__fish_seen_subcommand_from status watch" -l client -x -a '(__browser_login_ids client)' -d 'only this client'
complete -c browser-login -n "__fish_seen_subcommand_from status" -l no-reconcile -d 'do not contact the servers'
complete -c browser-login -n "__fish_seen_subcommand_from start resume" -l no-browser -d 'print the link instead of opening it'
complete -c browser-login -n "__fish_seen_subcommand_from start" -l ephemeral -d 'private-session browser'
complete -c browser-login -n "__fish_seen_subcommand_from start" -l switch-account -d 'sign the current account out first'
complete -c browser-login -n "__fish_seen_subcommand_from start" -l add-account -d 'sign in one more account'
complete -c browser-login -n "__fish_seen_subcommand_from start" -l login-hint -x -d 'the address the sign-in page fills in'
complete -c browser-login -n "__fish_seen_subcommand_from session sign-out request" -l account -x -a '(__browser_login_ids account)' -d 'this account of the client'
complete -c browser-login -n "__fish_seen_subcommand_from start" -l device -d 'sign in on another device'
complete -c browser-login -n "__fish_seen_subcommand_from start" -l wait -d 'wait until signed in'
complete -c browser-login -n "__fish_seen_subcommand_from start resume" -l activation-token -x -d 'bring the browser to the front'
complete -c browser-login -n "__fish_seen_subcommand_from start request" -l timeout -x -d 'seconds'
complete -c browser-login -n "__fish_seen_subcommand_from request" -s d -l data -r -d 'the body, @FILE, @- for standard input'
complete -c browser-login -n "__fish_seen_subcommand_from request" -s H -l header -x -d 'a request header'
complete -c browser-login -n "__fish_seen_subcommand_from install-handler" -l scheme -x -d 'register this scheme'
complete -c browser-login -n "__fish_seen_subcommand_from install-handler" -l uninstall -d 'remove the desktop file'

complete -c browser-login -n "__fish_seen_subcommand_from start session sign-out request accounts use; and test (__browser_login_position) = 0" -a '(__browser_login_ids client)'
complete -c browser-login -n "__fish_seen_subcommand_from use; and test (__browser_login_position) = 1" -a '(__browser_login_ids account)'
complete -c browser-login -n "__fish_seen_subcommand_from request; and test (__browser_login_position) = 1" -a 'GET HEAD POST PUT PATCH DELETE'
complete -c browser-login -n "__fish_seen_subcommand_from cancel resume; and test (__browser_login_position) = 0" -a '(__browser_login_ids attempt)'
complete -c browser-login -n "__fish_seen_subcommand_from acknowledge; and test (__browser_login_position) = 0" -a '(__browser_login_ids all-attempts)'
complete -c browser-login -n "__fish_seen_subcommand_from vault; and not __fish_seen_subcommand_from status passphrase unlock lock" -x -a 'status passphrase unlock lock'
complete -c browser-login -n "__fish_seen_subcommand_from vault" -l passphrase-file -r -d 'read the passphrase from a file'
complete -c browser-login -n "__fish_seen_subcommand_from vault" -l new-passphrase-file -r -d 'read the new passphrase from a file'
complete -c browser-login -n "__fish_seen_subcommand_from vault" -l directory -r -d "the file vault's directory"
