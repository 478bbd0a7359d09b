# cache.sh — sourced by the setup scripts (bash): the per-user cache of what they
# install, so that every clone on a machine reuses one llama.cpp build, one set of
# venvs and one set of converted models (docs/testing.md, "Setup and its cache").
#
#   MEMDECAY_CACHE   the cache's root; default ${XDG_CACHE_HOME:-~/.cache}/memdecay.
#                    Point it at an empty directory to install everything anew.
#
# An entry is a directory NAME-KEY under the root, KEY a hash of what pins it (the
# versions, the requirement files, the recipe's own revision number), so a changed
# pin makes a new entry and never edits an old one.  An entry is complete when its
# `.complete` stamp exists; a script holds the entry's lock while it builds, so two
# clones setting up at once wait for each other instead of racing.  The clone's
# .deps/ keeps only its own small files: the .env files and links into the cache.

MEMDECAY_CACHE=${MEMDECAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memdecay}

# md_cache_entry NAME PART... — prints the entry's real path and creates it.  A
# PART "file:PATH" counts by the file's content (or as absent), never by its path,
# so every clone of one commit finds the same entry; any other PART as a string.
md_cache_entry() {
	local name=$1 p key dir
	shift
	key=$(for p in "$@"; do
		case $p in
		file:*)
			if [ -f "${p#file:}" ]; then
				printf 'file %s %s\n' "$(basename "${p#file:}")" "$(sha256sum <"${p#file:}" | cut -d' ' -f1)"
			else
				printf 'file %s absent\n' "$(basename "${p#file:}")"
			fi
			;;
		*) printf 'str %s\n' "$p" ;;
		esac
	done | sha256sum | cut -c1-16)
	dir=$MEMDECAY_CACHE/$name-$key
	mkdir -p "$dir"
	(cd -P "$dir" && pwd)
}

# md_cache_lock ENTRY — an exclusive lock on ENTRY until the calling script exits.
md_cache_lock() {
	exec 9>"$1.lock"
	if ! flock -n 9; then
		printf 'cache: waiting for another setup that holds %s\n' "$1" >&2
		flock 9
	fi
}

# md_cache_state ENTRY — "hit" when ENTRY was complete before this run, else "built".
md_cache_state() {
	if [ -f "$1/.complete" ]; then echo hit; else echo built; fi
}

# md_link TARGET LINK — LINK becomes a symbolic link to TARGET (a directory or file
# left at LINK by an older layout of .deps/ is removed first).
md_link() {
	mkdir -p "$(dirname "$2")"
	if [ -e "$2" ] && [ ! -L "$2" ]; then rm -rf "$2"; fi
	ln -sfn "$1" "$2"
}

# md_setup_record LOCAL NAME STATE SECONDS ENTRY — what this setup step did, for the
# test command's table (.deps/NAME.setup: "STATE SECONDS ENTRY").
md_setup_record() {
	printf '%s %s %s\n' "$3" "$4" "$5" >"$1/$2.setup"
}
