# bash completion for browser-login(1): commands, options, client ids (from
# `browser-login clients --json`) and attempt ids (from `browser-login status
# --json`), account keys (from `browser-login accounts CLIENT --json`). Installed as share/bash-completion/completions/browser-login.

# The ids of the broker's clients, or of its attempts that need attention
# (`--all`: every attempt). Silent when the broker is not running.
_browser_login_ids() {
    local kind=$1 all=$2
    local -a cmd=("${_browser_login_prog:-browser-login}")
    [ -n "$_browser_login_socket" ] && cmd+=(--socket "$_browser_login_socket")
    if [ "$kind" = client ]; then
        "${cmd[@]}" clients --json 2>/dev/null | grep -o '"id":"[^"]*"' | cut -d'"' -f4
    elif [ "$kind" = account ]; then
        [ -n "$all" ] && "${cmd[@]}" accounts "$all" --json 2>/dev/null | grep -o '"accountKey":"[^"]*"' | cut -d'"' -f4
    else
        "${cmd[@]}" status --json --no-reconcile $all 2>/dev/null | grep -o '"attemptId":"[^"]*"' | cut -d'"' -f4
    fi
}

_browser_login() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local commands="status start finish cancel resume acknowledge session sign-out accounts use request clients watch install-handler doctor vault help"
    local i word command="" position=0 client=""
    _browser_login_prog=${COMP_WORDS[0]}
    _browser_login_socket=""
    COMPREPLY=()

    # The command, the --socket given before it, and which argument is being completed.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [ -z "$command" ]; then
            case $word in
                --socket) _browser_login_socket=${COMP_WORDS[i + 1]}; ((i++)) ;;
                --socket=*) _browser_login_socket=${word#--socket=} ;;
                -*) ;;
                *) command=$word ;;
            esac
        else
            case $word in
                --client | --scheme | --timeout | --activation-token | -d | --data | -H | --header | --passphrase-file | --new-passphrase-file | --directory | --account | --login-hint) ((i++)) ;;
                -*) ;;
                *) [ "$position" = 0 ] && client=$word; ((position++)) ;;
            esac
        fi
    done

    if [ -z "$command" ]; then
        case $prev in
            --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        esac
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--socket --json --version -h --help" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi

    case $prev in
        --client) COMPREPLY=($(compgen -W "$(_browser_login_ids client)" -- "$cur")); return ;;
        --account) COMPREPLY=($(compgen -W "$(_browser_login_ids account "$client")" -- "$cur")); return ;;
        --scheme | --timeout | --activation-token | --login-hint) return ;;
        --passphrase-file | --new-passphrase-file | --directory) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -H | --header)
            COMPREPLY=($(compgen -W "'Content-Type: application/json' 'Accept: application/json'" -- "$cur"))
            return ;;
        -d | --data)
            if [[ $cur == @* ]]; then
                COMPREPLY=($(compgen -f -P @ -- "${cur#@}"))
            fi
            return ;;
    esac

    local options="--json -h --help"
    case $command in
        status) options+=" --all --client --no-reconcile" ;;
        start) options+=" --no-browser --ephemeral --switch-account --add-account --login-hint --device --wait --timeout --activation-token" ;;
        session | sign-out) options+=" --account" ;;
        resume) options+=" --no-browser --activation-token" ;;
        request) options+=" -d --data -H --header --timeout --account" ;;
        watch) options+=" --client" ;;
        install-handler) options+=" --scheme --uninstall" ;;
        vault) options+=" --passphrase-file --new-passphrase-file --directory" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$options" -- "$cur"))
        return
    fi

    case $command:$position in
        start:0 | session:0 | sign-out:0 | request:0 | accounts:0 | use:0)
            COMPREPLY=($(compgen -W "$(_browser_login_ids client)" -- "$cur")) ;;
        use:1) COMPREPLY=($(compgen -W "$(_browser_login_ids account "$client")" -- "$cur")) ;;
        request:1) COMPREPLY=($(compgen -W "GET HEAD POST PUT PATCH DELETE" -- "$cur")) ;;
        cancel:0 | resume:0) COMPREPLY=($(compgen -W "$(_browser_login_ids attempt)" -- "$cur")) ;;
        acknowledge:0) COMPREPLY=($(compgen -W "$(_browser_login_ids attempt --all)" -- "$cur")) ;;
        vault:0) COMPREPLY=($(compgen -W "status passphrase unlock lock" -- "$cur")) ;;
    esac
}

complete -F _browser_login browser-login
