"""The faults, each with the test that inflicts it on the real code.

A review of the outputs' robustness tried 74 faults (quick mode, a real ``dask scheduler`` and two
``dask worker`` processes on 127.0.0.1): 56 behaved as promised, 18 did not, plus a group of smaller
ones. Its exact list was not published; this one reconstructs it by family, as a demanding user
would try them. ``tests/test_fault_catalogue.py`` checks that every entry's test
exists and that there are at least 74 entries.

``status`` says where an entry stands:

* ``fixed``: one of the 18 failures or of the smaller group, fixed and tested before this catalogue;
* ``covered``: behaved as promised and was already a test elsewhere;
* ``scripted``: behaved as promised, scripted now (in the test file of the code it is inflicted on);
* ``bug``: found while scripting, fixed with its test (the expected behaviour is after the fix).

``node`` is a pytest node id; ``path::function[~text]`` names the parametrized case whose id
contains ``text`` (for ids that hold tabs and regular expressions).
"""

from __future__ import annotations

from typing import NamedTuple


class Fault(NamedTuple):
    id: str
    family: str
    fault: str
    expected: str
    node: str
    status: str


FAMILIES = ("interrupt", "cache", "disk", "sst2", "glove", "jena", "concurrency", "settings", "dask", "label")
STATUSES = ("fixed", "covered", "scripted", "bug")

_CLI, _A, _E, _S = "tests/test_cli.py", "tests/test_atomic.py", "tests/test_experiments.py", "tests/test_data_sst2.py"
_J, _G, _RC, _SW = "tests/test_data_jena.py", "tests/test_data_glove.py", "tests/test_results_cache.py", "tests/test_sweep.py"
_R, _RP, _LB, _DB = "tests/test_reproduce.py", "tests/test_reproduce_publish.py", "tests/test_local_backend.py", "tests/test_dask_backend.py"
_DP, _ID, _CI, _MS = "tests/test_dask_processes.py", "tests/test_identity.py", "tests/test_code_identity.py", "tests/test_mode_stamp.py"
_ST, _FL, _BB = "tests/test_settings.py", "tests/test_file_lock.py", "tests/test_book_build.py"
_OTHER_CODE = f"{_ID}::test_a_worker_running_other_resgd_code_refuses_the_task_and_nothing_is_cached"
_BAD_SETTING = f"{_CLI}::test_a_bad_setting_stops_reproduce_before_any_part_runs"
_DAMAGE = f"{_RC}::test_a_damaged_run_cache_entry_is_reported_and_recomputed_to_the_same_result"
_TSV = f"{_S}::test_malformed_tsv_names_file_line_and_field"
_SST2 = f"{_S}::test_a_malformed_sst2_file_names_file_line_and_field"
_GLOVE = f"{_G}::test_a_malformed_glove_table_names_file_and_key"
_JENA = f"{_J}::test_a_malformed_jena_file_names_file_line_and_field"
_ONE_LINE_1 = "one error line naming the file, line and field; exit 1 from the CLI"

FAULTS: tuple[Fault, ...] = (
    # ------------------------------------------------------------------ interrupts
    Fault("I1", "interrupt", "SIGTERM to python -m resgd reproduce mid-part", "one line, exit 143, workers ended",
          f"{_CLI}::test_reproduce_stops_on_a_signal_in_one_line[SIGTERM-143]", "fixed"),
    Fault("I2", "interrupt", "Ctrl-C (SIGINT) to python -m resgd reproduce mid-part", "one line, exit 130, workers ended",
          f"{_CLI}::test_reproduce_stops_on_a_signal_in_one_line[SIGINT-130]", "fixed"),
    Fault("I3", "interrupt", "SIGTERM to the book build", "papermill and its kernel ended, one line, exit 143",
          "tests/test_book_build.py::test_sigterm_to_the_build_ends_papermill_and_its_kernel_in_one_line", "fixed"),
    Fault("I16", "interrupt", "SIGHUP to the book build (a closed terminal)", "the SIGTERM path: papermill and its kernel "
          "ended, one line, exit 129 (was: the build died silently, the kernel rewrote a figure after it)",
          "tests/test_book_build.py::test_every_stopping_signal_takes_the_one_stop_path[SIGHUP-129]", "fixed"),
    Fault('I4', 'interrupt', "kill -9 between the renames of a part's publish",
          'old outputs or new ones, whole, after the kill and after the next publish (one rename switches the build)',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-build]', 'fixed'),
    Fault('I17', 'interrupt', "a stage record holding '..' or absolute paths (damaged, or forged)",
          "no record exists: an earlier version's stage folder is removed unread, nothing outside is moved or written (was: followed, moving a file from outside the output folders in and writing one outside them)",
          'tests/test_reproduce_publish.py::test_no_record_is_read_a_forged_stage_or_pointer_moves_nothing_from_outside', 'bug'),
    Fault("I18", "interrupt", "--jobs 100000 on a 2-core machine", "as many processes as cores, said in one line "
          "(was: accepted, a worker forked per job)",
          f"{_CLI}::test_more_jobs_than_cores_run_as_many_as_the_cores_and_say_so", "bug"),
    Fault("I5", "interrupt", "a local worker process killed mid-sweep", "its tasks run again on a fresh pool; results complete",
          f"{_LB}::test_a_dead_local_worker_s_tasks_are_run_again", "fixed"),
    Fault("I6", "interrupt", "SIGTERM to a parallel sweep", "no worker process outlives it",
          f"{_LB}::test_no_worker_outlives_a_stopped_sweep[SIGTERM]", "covered"),
    Fault("I7", "interrupt", "kill -9 of a parallel sweep", "its workers exit by themselves",
          f"{_LB}::test_no_worker_outlives_a_stopped_sweep[SIGKILL]", "covered"),
    Fault("I8", "interrupt", "an exception mid-sweep, then a rerun", "the rerun resumes from the cached entries",
          f"{_E}::test_sweep_resumes_after_an_interruption", "covered"),
    Fault("I9", "interrupt", "a part failing while publishing", "every earlier output left as it was",
          f"{_RP}::test_a_failure_while_publishing_leaves_every_earlier_output_as_it_was", "covered"),
    Fault("I10", "interrupt", "kill -9 of python -m resgd reproduce between two cache entries",
          "the entries written are kept, nothing half-written, no table published",
          f"{_R}::test_kill_9_then_sigterm_mid_sweep_then_two_reruns_at_once_give_the_bytes_of_an_uninterrupted_run", "scripted"),
    Fault("I11", "interrupt", "SIGTERM of the resumed run between two cache entries, then a rerun",
          "exit 143; the rerun computes only the missing runs; the table has the bytes of an uninterrupted run",
          f"{_R}::test_kill_9_then_sigterm_mid_sweep_then_two_reruns_at_once_give_the_bytes_of_an_uninterrupted_run", "scripted"),
    Fault('I12', 'interrupt', "SIGTERM between the renames of a part's publish (after its manifest)",
          'old outputs or new ones, whole, at every step; exit 143',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[SIGTERM-build]', 'fixed'),
    Fault('I13', 'interrupt', "Ctrl-C (SIGINT) between the renames of a part's publish",
          'old outputs or new ones, whole, at every step; exit 130',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[SIGINT-build]', 'fixed'),
    Fault('I14', 'interrupt', "kill -9 right after a publish's manifest, figures and results folders both written",
          'old outputs or new ones, whole, at every step (no commit record to roll forward)',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-build]', 'fixed'),
    Fault('I15', 'interrupt', 'kill -9 while a publish stages its files',
          'old outputs, whole; the killed build is removed by the next publish',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-build]', 'fixed'),
    # ------------------------------------------------------------------ damaged cache entries
    Fault("C1", "cache", "an entry truncated", "reported once, recomputed",
          f"{_RC}::test_a_rejected_cache_entry_is_reported_once", "fixed"),
    Fault("C2", "cache", "an entry without the digest of its data", "every entry holds the digest of the data it used",
          f"{_RC}::test_every_cache_entry_holds_the_digest_of_its_data", "fixed"),
    Fault("C3", "cache", "another key's valid entry copied over an entry", "rejected (wrong key), recomputed",
          f"{_RC}::test_another_runs_entry_copied_over_is_rejected_and_recomputed", "covered"),
    Fault("C4", "cache", "an entry's content edited (wrong sha)", "fails its checksum, recomputed",
          f"{_RC}::test_edited_entry_fails_its_checksum_and_is_recomputed", "covered"),
    Fault("C5", "cache", "an entry of the old, unverified format", "rejected, recomputed",
          f"{_RC}::test_unverified_old_format_entry_is_rejected", "covered"),
    Fault("C6", "cache", "a damaged entry", "recomputed", f"{_E}::test_damaged_entry_is_recomputed", "covered"),
    Fault("C7", "cache", "a temporary file left by a killed writer", "removed by the next run",
          f"{_A}::test_a_temporary_left_by_a_killed_writer_is_removed_by_the_next_run", "covered"),
    Fault("C8", "cache", "a live writer's temporary file", "kept", f"{_A}::test_a_live_writers_temporary_is_kept", "covered"),
    Fault("C9", "cache", "a user's file that looks like a temporary", "only our stale temporaries removed",
          f"{_A}::test_only_our_stale_temporaries_are_removed", "covered"),
    Fault("C10", "cache", "a write that fails midway", "no partial entry", f"{_E}::test_failed_write_leaves_no_partial_file", "covered"),
    Fault("C11", "cache", "an unreadable parsed-data cache entry (.npz)", "rebuilt", f"{_J}::test_unreadable_cache_entry_is_rebuilt", "covered"),
    Fault("C12", "cache", "a zero-length entry", "reported (EOFError), recomputed to the same result", f"{_DAMAGE}[zero-length]", "scripted"),
    Fault("C13", "cache", "an entry of garbage bytes", "reported, recomputed to the same result", f"{_DAMAGE}[garbage bytes]", "scripted"),
    Fault("C14", "cache", "an entry cut in half", "reported, recomputed to the same result", f"{_DAMAGE}[cut in half]", "scripted"),
    Fault("C15", "cache", "a valid pickle that is not an entry", "not a verified entry, recomputed",
          f"{_DAMAGE}[a pickle that is not an entry]", "scripted"),
    Fault("C16", "cache", "an entry of a newer format version", "not a verified entry, recomputed",
          f"{_DAMAGE}[a newer entry format]", "scripted"),
    Fault("C17", "cache", "an entry whose content is not bytes", "does not match its checksum, recomputed",
          f"{_DAMAGE}[content that is not bytes]", "scripted"),
    Fault("C18", "cache", "an entry whose checksum matches a content that is no pickle", "content unreadable, recomputed",
          f"{_DAMAGE}[checksum right, content not a pickle]", "scripted"),
    Fault("C19", "cache", "an entry of a class that no longer exists", "content unreadable (ModuleNotFoundError), recomputed",
          f"{_DAMAGE}[content of a class that no longer exists]", "scripted"),
    Fault("C20", "cache", "a folder where an entry should be", "one line (a folder stands where a file is needed), exit 1, the folder kept",
          f"{_RC}::test_a_folder_where_a_cache_entry_should_be_is_one_line_exit_1_and_the_other_entries_are_kept", "scripted"),
    Fault("C21", "cache", "an entry made unreadable (chmod 000)", "reported as unreadable, recomputed, readable again",
          f"{_RC}::test_an_unreadable_cache_entry_is_reported_and_recomputed", "scripted"),
    Fault("C22", "cache", "the run cache read-only (chmod 555)", "one line naming it, exit 1, before any part",
          f"{_R}::test_a_read_only_output_folder_stops_the_run_before_any_work[results/cache]", "scripted"),
    Fault("C23", "cache", "the cache's locks/ folder read-only", "one line naming it, exit 1, no traceback",
          f"{_RC}::test_a_read_only_lock_folder_is_one_line_not_a_traceback", "scripted"),
    Fault("C24", "cache", "a file where the run cache folder should be", "one line, exit 1, before any part",
          f"{_CLI}::test_an_unwritable_output_folder_stops_the_run_before_any_part", "covered"),
    Fault("C25", "cache", "a Jena file edited with its mtime restored", "parsed again: the parsed-data cache is keyed by "
          "the file's content (was: the old parse and digest kept)",
          f"{_J}::test_a_jena_file_edited_with_its_mtime_restored_is_parsed_again", "fixed"),
    # ------------------------------------------------------------------ full disk, unwritable outputs
    Fault("W1", "disk", "full disk (ENOSPC) while writing a table", "one line, exit 1", f"{_CLI}::test_full_disk_while_writing_a_table", "covered"),
    Fault("W2", "disk", "full disk while writing a PDF figure", "ENOSPC named, not a zlib error",
          f"{_CLI}::test_full_disk_while_writing_a_pdf_figure_is_not_a_zlib_error", "covered"),
    Fault("W3", "disk", "full disk while saving a figure", "reported as ENOSPC",
          "tests/test_plots_save.py::test_a_full_disk_is_reported_as_enospc_not_as_zlib_error", "covered"),
    Fault("W4", "disk", "a file-size limit (RLIMIT_FSIZE, real EFBIG) hit while publishing a table",
          "one line, exit 1, the previous outputs untouched, no temporary left",
          f"{_R}::test_a_file_size_limit_hit_while_publishing_is_one_line_and_the_old_outputs_stay[a table-20000]", "scripted"),
    Fault("W5", "disk", "a file-size limit (real EFBIG) hit while publishing a figure",
          "one line, exit 1, the previous outputs untouched, no temporary left",
          f"{_R}::test_a_file_size_limit_hit_while_publishing_is_one_line_and_the_old_outputs_stay[a figure-10]", "scripted"),
    Fault("W6", "disk", "results folder not writable (EACCES)", "one line, exit 1", f"{_CLI}::test_read_only_output_folder[results]", "covered"),
    Fault("W7", "disk", "figures folder not writable (EACCES)", "one line, exit 1", f"{_CLI}::test_read_only_output_folder[figures]", "covered"),
    Fault("W8", "disk", "a file where the results folder should be", "one line (Not a directory), exit 1",
          f"{_CLI}::test_results_path_that_is_a_file", "covered"),
    Fault("W9", "disk", "an unwritable output folder", "reported before any work",
          f"{_R}::test_unwritable_output_folder_is_reported_before_any_work", "covered"),
    Fault("W10", "disk", "the figures folder read-only for real (chmod 555)", "one line naming it, exit 1, before any part",
          f"{_R}::test_a_read_only_output_folder_stops_the_run_before_any_work[figures]", "scripted"),
    Fault("W11", "disk", "the results folder read-only for real (chmod 555)", "one line naming it, exit 1, before any part",
          f"{_R}::test_a_read_only_output_folder_stops_the_run_before_any_work[results]", "scripted"),
    Fault("W12", "disk", "a --quick run into a folder of full-mode figures", "refused in one line before any work, the "
          "figures kept (was: overwritten with no mode on them)",
          f"{_MS}::test_a_run_of_the_other_mode_does_not_overwrite_a_folder_s_figures", "fixed"),
    Fault("W13", "disk", "the book build in a read-only checkout (EROFS)", "one line naming the folder, exit 1 (was: a traceback)",
          f"{_BB}::test_a_book_build_in_a_read_only_checkout_is_one_line", "fixed"),
    # ------------------------------------------------------------------ SST-2
    Fault("S1", "sst2", "wrong header (a column missing or renamed)", _ONE_LINE_1, f"{_TSV}[~expected 'sentence<TAB>label']", "covered"),
    Fault("S2", "sst2", "a bad label ('positive')", _ONE_LINE_1, f"{_TSV}[~got 'positive']", "covered"),
    Fault("S3", "sst2", "a row without its tab", _ONE_LINE_1, f"{_TSV}[~has 1 tab-separated]", "covered"),
    Fault("S4", "sst2", "an extra tab", _ONE_LINE_1, f"{_TSV}[~has 3 tab-separated]", "covered"),
    Fault("S5", "sst2", "an empty sentence", _ONE_LINE_1, f"{_TSV}[~field 'sentence': empty]", "covered"),
    Fault("S6", "sst2", "header only", "one line: no data rows", f"{_TSV}[~no data rows]", "covered"),
    Fault("S7", "sst2", "an empty file", "one line: the file is empty", f"{_TSV}[~the file is empty]", "covered"),
    Fault("S8", "sst2", "Latin-1 text (wrong encoding)", "one line naming the line that is not UTF-8",
          f"{_S}::test_non_utf8_text_names_the_line", "covered"),
    Fault("S9", "sst2", "a truncated train.tsv.gz", "one line: truncated or corrupt, replace it", f"{_S}::test_truncated_gzip_is_detected", "covered"),
    Fault("S10", "sst2", "a file that is not the official one", "one line naming the file and the expected sha256",
          f"{_S}::test_wrong_checksum_names_file_and_expected_hash", "covered"),
    Fault("S11", "sst2", "one label flipped in the real dev.tsv", "fails its checksum", f"{_S}::test_tampered_real_file_fails_its_checksum", "covered"),
    Fault("S12", "sst2", "a damaged official file", "its line and field, then the checksum and the advice",
          f"{_S}::test_a_damaged_official_file_is_reported_with_its_line_and_field", "fixed"),
    Fault("S13", "sst2", "a byte-order mark before the header", _ONE_LINE_1, f"{_SST2}[byte-order mark]", "scripted"),
    Fault("S14", "sst2", "a UTF-16 file", "one line: line 1 is not UTF-8", f"{_SST2}[UTF-16]", "scripted"),
    Fault("S15", "sst2", "a label written 1.0", _ONE_LINE_1, f"{_SST2}[label 1.0]", "scripted"),
    Fault("S16", "sst2", "a blank line at the end", _ONE_LINE_1, f"{_SST2}[blank line]", "scripted"),
    Fault("S17", "sst2", "plain text named train.tsv.gz", "one line: cannot read the file (not gzip)", f"{_SST2}[plain text named .gz]", "scripted"),
    Fault("S18", "sst2", "a folder named dev.tsv", "one line naming it", f"{_S}::test_a_folder_where_an_sst2_file_should_be_is_named", "scripted"),
    Fault("S19", "sst2", "a duplicated row in the real dev.tsv", "fails its checksum (duplicates parse)",
          f"{_S}::test_a_duplicated_row_in_the_real_dev_file_fails_its_checksum", "scripted"),
    Fault("S20", "sst2", "a bad label, through python -m resgd reproduce --only sst2", "exit 1, one line with file, line and field; nothing trained",
          f"{_S}::test_a_corrupt_sst2_file_from_the_command_line_is_one_line_and_exit_1", "scripted"),
    Fault("S21", "sst2", "a 3 GB file as train.tsv", "one line once past 64 MiB, never read whole (was: MemoryError)",
          f"{_S}::test_a_3_gb_sst2_file_is_refused_in_one_line_while_it_is_read", "fixed"),
    Fault("S22", "sst2", "a FIFO as dev.tsv", "one line: not a regular file (was: skipped as missing; a read blocks)",
          f"{_S}::test_an_sst2_path_that_is_not_a_regular_file_is_refused_in_one_line[FIFO]", "fixed"),
    Fault("S23", "sst2", "/dev/zero as dev.tsv", "one line: not a regular file",
          f"{_S}::test_an_sst2_path_that_is_not_a_regular_file_is_refused_in_one_line[/dev/zero]", "fixed"),
    Fault("S24", "sst2", "the official file with Windows line ends (CRLF)", "the checksum message names the CRLF line ends "
          "(was: 'corrupt' without a word on them)", f"{_S}::test_an_sst2_file_with_windows_line_ends_says_so", "fixed"),
    # ------------------------------------------------------------------ GloVe
    Fault("G1", "glove", "a truncated GloVe table", "one line: truncated or corrupt, replace it", f"{_S}::test_corrupt_glove_file_is_reported", "covered"),
    Fault("G2", "glove", "vectors shuffled against their words", "fails the content checksum",
          f"{_S}::test_glove_vectors_shuffled_against_their_words_are_rejected", "fixed"),
    Fault("G3", "glove", "the GloVe file missing", "one line with file, URL and variable", f"{_S}::test_missing_glove_names_file_url_and_variable", "covered"),
    Fault("G4", "glove", "vectors of dimension 49", "one line naming file, key and shape", f"{_GLOVE}[dimension 49]", "scripted"),
    Fault("G5", "glove", "non-numeric vectors", "one line naming file, key and dtype", f"{_GLOVE}[text vectors]", "scripted"),
    Fault("G6", "glove", "NaN in the vectors", "one line naming file and key", f"{_GLOVE}[NaN]", "scripted"),
    Fault("G7", "glove", "the vectors key missing", "one line naming the missing key", f"{_GLOVE}[no vectors key]", "scripted"),
    Fault("G8", "glove", "numbers where the words belong", "one line naming file, key and dtype", f"{_GLOVE}[numbers as words]", "scripted"),
    Fault("G9", "glove", "a duplicated word", "fails the content checksum",
          f"{_G}::test_a_glove_table_with_a_duplicated_or_missing_word_fails_its_content_checksum[duplicated word]", "scripted"),
    Fault("G10", "glove", "a missing word", "fails the content checksum",
          f"{_G}::test_a_glove_table_with_a_duplicated_or_missing_word_fails_its_content_checksum[missing word]", "scripted"),
    # ------------------------------------------------------------------ Jena
    Fault("J1", "jena", "a wrong header column", _ONE_LINE_1, f"{_J}::test_wrong_header_names_file_and_column", "covered"),
    Fault("J2", "jena", "a header column missing", _ONE_LINE_1, f"{_J}::test_missing_header_column_is_reported", "covered"),
    Fault("J3", "jena", "a non-numeric cell", _ONE_LINE_1, f"{_J}::test_non_numeric_value_names_line_and_field", "covered"),
    Fault("J4", "jena", "a short row", _ONE_LINE_1, f"{_J}::test_short_row_names_the_empty_field", "covered"),
    Fault("J5", "jena", "a long row", "one line naming the line", f"{_J}::test_long_row_is_reported_with_its_line", "covered"),
    Fault("J6", "jena", "a wrong date format", _ONE_LINE_1, f"{_J}::test_bad_date_names_line_field_and_format", "covered"),
    Fault("J7", "jena", "an empty or header-only file", "one line each", f"{_J}::test_empty_and_header_only_files_are_rejected", "covered"),
    Fault("J8", "jena", "not the canonical file (row count, dates)", "one line naming row count and dates",
          f"{_J}::test_canonical_check_names_row_count_and_dates", "covered"),
    Fault("J9", "jena", "'nan' written in a cell", "reported as written", f"{_J}::test_nan_text_is_reported_as_written_not_as_an_empty_field", "fixed"),
    Fault("J10", "jena", "pressure and temperature swapped under a correct header", "out-of-range value: line and field",
          f"{_J}::test_pressure_and_temperature_swapped_under_a_correct_header_are_rejected", "fixed"),
    Fault("J11", "jena", "negative wind other than the -9999 marker", "out-of-range value: line and field",
          f"{_J}::test_wind_error_marker_is_accepted_but_other_negative_wind_is_not", "fixed"),
    Fault("J12", "jena", "a day given the wrong year (unsorted)", "the line that goes back in time",
          f"{_J}::test_a_day_given_the_wrong_year_is_rejected_with_its_line", "fixed"),
    Fault("J13", "jena", "a duplicate timestamp with other values", "a conflict: line and field; exact repeats counted",
          f"{_J}::test_conflicting_duplicate_is_rejected_exact_repeat_is_counted", "fixed"),
    Fault("J14", "jena", "gaps in the timestamps", "counted, filled hourly", f"{_J}::test_gaps_are_counted", "covered"),
    Fault("J15", "jena", "a damaged stand-in copy in the cache", "written again",
          f"{_J}::test_a_damaged_standin_copy_is_written_again[cut inside a line]", "covered"),
    Fault("J16", "jena", "a bad Jena file in the (read-only) data folder", "advice: replace it, not delete it",
          f"{_J}::test_a_bad_file_in_the_data_folder_is_not_to_be_deleted[True]", "covered"),
    Fault("J17", "jena", "a truncated download", "fails the canonical check", f"{_J}::test_truncated_download_fails_the_canonical_check", "covered"),
    Fault("J18", "jena", "a byte-order mark before the header", _ONE_LINE_1, f"{_JENA}[byte-order mark]", "scripted"),
    Fault("J19", "jena", "a UTF-16 file", "one line: the header is not UTF-8", f"{_JENA}[UTF-16]", "scripted"),
    Fault("J20", "jena", "semicolons as separators", "one line naming the header", f"{_JENA}[semicolons]", "scripted"),
    Fault("J21", "jena", "decimal commas (a spreadsheet's export)", "line 2 has 29 fields (was: field 'Date Time': got '86')",
          f"{_JENA}[decimal commas]", "bug"),
    Fault("J22", "jena", "two rows swapped", "the line out of order", f"{_JENA}[two rows swapped]", "scripted"),
    Fault("J23", "jena", "ISO dates", _ONE_LINE_1, f"{_JENA}[ISO dates]", "scripted"),
    Fault("J24", "jena", "two-digit years", _ONE_LINE_1, f"{_JENA}[two-digit year]", "scripted"),
    Fault("J25", "jena", "month 13", _ONE_LINE_1, f"{_JENA}[month 13]", "scripted"),
    Fault("J26", "jena", "a file cut mid-line", _ONE_LINE_1, f"{_JENA}[cut mid-line]", "scripted"),
    Fault("J27", "jena", "an infinite value", "'got inf' (was: 'got np.float64(inf)')", f"{_JENA}[infinite pressure]", "bug"),
    Fault("J28", "jena", "Windows line ends", "not a fault: the same rows as with LF", f"{_J}::test_windows_line_ends_parse_as_the_same_rows", "scripted"),
    Fault("J29", "jena", "a non-canonical file, through python -m resgd reproduce --only jena", "exit 1, one line, advice that works there",
          f"{_CLI}::test_jena_advice_works_from_the_command_line", "covered"),
    Fault("J30", "jena", "decimal commas, through python -m resgd reproduce --only jena", "exit 1, one line; nothing trained",
          f"{_J}::test_a_corrupt_jena_file_from_the_command_line_is_one_line_and_exit_1", "bug"),
    Fault("J31", "jena", "a 5 GB file without line ends", "one line: the header is over 64 KiB, before any read or hash "
          "(was: MemoryError after 35 s)", f"{_J}::test_a_5_gb_jena_file_without_line_ends_is_refused_in_one_line_before_it_is_read", "fixed"),
    Fault("J32", "jena", "a FIFO as the Jena file", "one line: not a regular file (was: the synthetic stand-in, silently)",
          f"{_J}::test_a_jena_path_that_is_not_a_regular_file_is_refused_not_replaced_by_the_standin[FIFO]", "fixed"),
    Fault("J33", "jena", "/dev/zero as the Jena file", "one line: not a regular file (was: the synthetic stand-in, silently)",
          f"{_J}::test_a_jena_path_that_is_not_a_regular_file_is_refused_not_replaced_by_the_standin[/dev/zero]", "fixed"),
    Fault("J34", "jena", "a folder as the Jena file", "one line: not a regular file (was: the synthetic stand-in, silently)",
          f"{_J}::test_a_jena_path_that_is_not_a_regular_file_is_refused_not_replaced_by_the_standin[folder]", "fixed"),
    # ------------------------------------------------------------------ concurrent runs and locks
    Fault("R1", "concurrency", "two sweeps on one results folder at once", "each run computed once, the same results",
          f"{_SW}::test_two_runs_on_one_results_folder_compute_each_run_once", "covered"),
    Fault("R2", "concurrency", "an entry being computed by another run", "waited for and reused",
          f"{_SW}::test_a_second_sweep_waits_for_a_running_entry_and_reuses_it", "covered"),
    Fault("R3", "concurrency", "an entry's lock released without the entry", "computed after the wait",
          f"{_SW}::test_an_entry_whose_owner_died_is_computed_after_the_wait", "covered"),
    Fault("R4", "concurrency", "a run stopped (Ctrl-Z) while it holds locks", "named, then given up on after the stated time",
          f"{_RC}::test_a_stopped_run_does_not_block_a_second_one_forever", "fixed"),
    Fault("R5", "concurrency", "lock files after a run", "removed when released", f"{_RC}::test_lock_files_are_removed_when_released", "fixed"),
    Fault("R6", "concurrency", "a released lock file removed while another takes it", "never two holders",
          f"{_RC}::test_removing_a_released_lock_file_never_lets_two_holders_in", "fixed"),
    Fault("R7", "concurrency", "locks left by a run killed with kill -9 (a dead pid)", "taken over at once",
          f"{_RC}::test_locks_of_a_run_killed_with_kill_9_are_taken_over_at_once", "scripted"),
    Fault("R8", "concurrency", "two python -m resgd reproduce on one results folder at once",
          "each entry computed once, the waiter names the owner, the same table bytes",
          f"{_R}::test_kill_9_then_sigterm_mid_sweep_then_two_reruns_at_once_give_the_bytes_of_an_uninterrupted_run", "scripted"),
    Fault('R9', 'concurrency', 'two runs publishing other outputs into one results folder at once',
          'the second waits (and says so when the wait lasts), then publishes all of its own (was: a mix)',
          'tests/test_reproduce_publish.py::test_two_runs_publishing_into_one_folder_take_turns[~1.5]', 'fixed'),
    Fault("R10", "concurrency", "a lock held by a stopped process on another host",
          "given up on once its lock is not refreshed for the stated time, the message says why (was: waited on for ever)",
          f"{_RC}::test_a_lock_held_on_another_host_and_no_longer_refreshed_is_given_up_on_after_the_stated_time", "fixed"),
    Fault("R11", "concurrency", "a lock held by a live process on another host", "waited for while its heartbeat refreshes it",
          f"{_RC}::test_a_lock_of_another_host_that_is_refreshed_is_waited_for_and_held_locks_are_refreshed", "fixed"),
    # ------------------------------------------------------------------ settings
    Fault("E1", "settings", "RESGD_GRAD_BACKEND=manual (a retired engine switch)", "one line, exit 2",
          f"{_BAD_SETTING}[~RESGD_GRAD_BACKEND-manual]", "fixed"),
    Fault("E2", "settings", "RESGD_MKL_INTEL_PATH=yes", "one line, exit 2", f"{_BAD_SETTING}[~RESGD_MKL_INTEL_PATH-yes]", "fixed"),
    Fault("E3", "settings", "RESGD_DATA_DIR naming no folder", "one line, exit 2", f"{_BAD_SETTING}[~RESGD_DATA_DIR-]", "fixed"),
    Fault("E4", "settings", "RESGD_MODE=qiuck", "one line, exit 2", f"{_BAD_SETTING}[~RESGD_MODE-qiuck]", "fixed"),
    Fault("E5", "settings", "RESGD_OFFLINE=maybe", "one line, exit 2", f"{_BAD_SETTING}[~RESGD_OFFLINE-maybe]", "fixed"),
    Fault("E6", "settings", "RESGD_MOD (a typo of a name)", "one line, exit 2", f"{_BAD_SETTING}[~RESGD_MOD-quick]", "fixed"),
    Fault("E7", "settings", "a missing RESGD_DATA_DIR folder", "one line, exit 2, before any work", f"{_CLI}::test_missing_data_dir_is_reported", "fixed"),
    Fault("E8", "settings", "RESGD_MODE=quick ignored / a typo passed", "--quick, else RESGD_MODE, else full",
          f"{_CLI}::test_reproduce_honours_resgd_mode[env1-flag1-True]", "fixed"),
    Fault("E9", "settings", "RESGD_MKL_INTEL_PATH=yes through python -m resgd", "one line, exit 2",
          f"{_CLI}::test_mkl_intel_path_yes_is_one_line_exit_2_from_python_m_resgd", "fixed"),
    Fault("E10", "settings", "a bad setting through python -m resgd", "exit 2, the message alone",
          f"{_CLI}::test_module_entry_point_config_error[debug0]", "covered"),
    Fault("E11", "settings", "--jobs 0", "usage error, exit 2", f"{_CLI}::test_argument_errors[argv1-expected a whole number >= 1]", "covered"),
    Fault("E12", "settings", "--jobs two", "usage error, exit 2", f"{_CLI}::test_argument_errors[argv2-expected a whole number >= 1, got 'two']", "covered"),
    Fault("E13", "settings", "an unknown part name", "usage error naming the choices, exit 2", f"{_CLI}::test_unknown_name_is_a_clear_usage_error", "covered"),
    Fault("E14", "settings", "a mistyped command", "usage error, exit 2", f"{_CLI}::test_argument_errors[argv4-invalid choice: 'reproduc']", "covered"),
    Fault("E15", "settings", "RESGD_RESULTS_DIR=results (relative)", "resolved against the working folder at startup; the "
          "notebooks get the absolute path (was: page 06 looked in notebooks/results)",
          f"{_ST}::test_a_relative_results_dir_reaches_the_notebooks_as_an_absolute_path", "fixed"),
    Fault("E16", "settings", "--results-dir ''", "one line, exit 2, nothing written (was: wrote to ./results)",
          f"{_ST}::test_an_empty_path_setting_is_refused_in_one_line[~--results-dir '']", "fixed"),
    Fault("E17", "settings", "--figures-dir ' '", "one line, exit 2, nothing written",
          f"{_ST}::test_an_empty_path_setting_is_refused_in_one_line[~--figures-dir '']", "fixed"),
    Fault("E18", "settings", "RESGD_RESULTS_DIR set but empty", "one line, exit 2 (was: taken as unset)",
          f"{_ST}::test_an_empty_path_setting_is_refused_in_one_line[~RESGD_RESULTS_DIR is set but empty]", "fixed"),
    Fault("E19", "settings", "RESGD_FIGURES_DIR set but empty", "one line, exit 2",
          f"{_ST}::test_an_empty_path_setting_is_refused_in_one_line[~RESGD_FIGURES_DIR is set but empty]", "fixed"),
    Fault("E20", "settings", "RESGD_CACHE_DIR set but empty", "one line, exit 2",
          f"{_ST}::test_an_empty_path_setting_is_refused_in_one_line[~RESGD_CACHE_DIR is set but empty]", "fixed"),
    Fault("E21", "settings", "RESGD_DATA_DIR set but empty", "one line, exit 2",
          f"{_ST}::test_an_empty_path_setting_is_refused_in_one_line[~RESGD_DATA_DIR is set but empty]", "fixed"),
    # ------------------------------------------------------------------ Dask
    Fault("K1", "dask", "a worker with other data than the client", "one line naming the worker and both digests; nothing cached",
          f"{_ID}::test_a_worker_with_other_data_fails_before_training_and_nothing_is_cached", "fixed"),
    Fault("K2", "dask", "the scheduler killed mid-run", "one line within seconds; the results so far cached",
          f"{_DP}::test_a_scheduler_killed_mid_run_is_one_line_and_the_results_so_far_are_kept", "fixed"),
    Fault("K3", "dask", "a scheduler address nobody answers at", "one line, exit 2, before any work",
          f"{_CLI}::test_a_bad_scheduler_address_is_one_line_and_exit_2_before_any_work[tcp://127.0.0.1:1-nothing answers at 127.0.0.1:1]", "fixed"),
    Fault("K4", "dask", "a scheduler address that does not parse", "one line, exit 2, before any work",
          f"{_CLI}::test_a_bad_scheduler_address_is_one_line_and_exit_2_before_any_work[tcp:/127.0.0.1-not an address of the form tcp://HOST:PORT]", "fixed"),
    Fault("K5", "dask", "a worker killed mid-sweep (another remains)", "its tasks resubmitted, results identical",
          f"{_DB}::test_worker_killed_mid_sweep", "covered"),
    Fault("K6", "dask", "the cluster restarted mid-sweep", "tasks resubmitted, each result written once", f"{_DB}::test_restart_mid_sweep", "covered"),
    Fault("K7", "dask", "a task that raises", "its error propagates, not retried", f"{_DB}::test_task_error_propagates_and_duplicate_keys_refused", "covered"),
    Fault("K8", "dask", "a worker started after the sweep began", "the sweep waits and completes",
          f"{_DP}::test_a_late_worker_then_its_kill_9_mid_sweep_then_a_worker_s_address_as_the_scheduler", "scripted"),
    Fault("K9", "dask", "the only worker killed (-9) mid-sweep, a new one started", "its task resubmitted; every result right, written once",
          f"{_DP}::test_a_late_worker_then_its_kill_9_mid_sweep_then_a_worker_s_address_as_the_scheduler", "scripted"),
    Fault("K10", "dask", "a worker's address given as the scheduler", "one line (a Dask worker, not the scheduler), exit 2",
          f"{_DP}::test_a_late_worker_then_its_kill_9_mid_sweep_then_a_worker_s_address_as_the_scheduler", "bug"),
    Fault("K11", "dask", "an address that accepts connections but is no scheduler (the dashboard's port)",
          "one line within seconds, exit 2 (was: the client waited for ever)",
          f"{_ID}::test_a_port_that_accepts_but_is_not_a_scheduler_is_one_line_exit_2_not_a_hang", "bug"),
    Fault("K12", "dask", "a bad RESGD_SCHEDULER", "one line naming the variable, exit 2",
          f"{_ID}::test_a_bad_scheduler_address_in_the_environment_is_one_line_exit_2", "scripted"),
    Fault("K13", "dask", "a worker running another resgd version", "one line naming the worker and both versions and "
          "source hashes, exit 2; nothing cached (was: trained, cached under the client's key)", f"{_OTHER_CODE}[version]", "fixed"),
    Fault("K14", "dask", "a worker running an edited step (same version)", "one line naming the worker and both source "
          "hashes, exit 2; nothing cached (was: trained, cached under the client's key)", f"{_OTHER_CODE}[source]", "fixed"),
    Fault("K15", "dask", "a worker over its memory limit, ended by its nanny", "one line, exit 1, saying what to check "
          "(was: a DaskSweepError traceback)", f"{_DB}::test_a_dask_worker_over_its_memory_limit_ends_the_sweep_in_one_line", "fixed"),
    # ------------------------------------------------------------------ outputs that cannot mix (cache keys, settings)
    Fault("C26", "cache", "the end-of-run metrics in runs.py (the cached test loss and accuracies) edited", "the code hash its run-cache "
          "entries record changes: the runs are computed again; a docstring or comment edit keeps it (was: served the "
          "other code's numbers; the key named a hand list of modules)",
          "tests/test_cache_keys.py::test_an_edited_constant_in_any_computing_module_changes_the_key",
          "fixed"),
    Fault("C27", "cache", "a module imported on the compute path left out of the cache key", "the key covers the import "
          "closure, checked against the modules a run and an L̂ import",
          "tests/test_cache_keys.py::test_the_cache_key_covers_every_module_a_cached_number_is_computed_with", "fixed"),
    Fault("C28", "cache", "a parsed-data entry of another parse (hourly mean) copied over the default one", "not served: "
          "each entry holds its key, checked on read; parsed again", f"{_J}::test_an_entry_of_another_parse_under_the_"
          "default_name_is_not_served", "fixed"),
    Fault("C29", "cache", "jena.py's parser edited without a version bump", "parsed again: the parser's version is its "
          "source's digest (was: the old parse served)", f"{_J}::test_an_edited_parser_parses_again", "fixed"),
    Fault("E22", "settings", "RESGD_MKL_INTEL_PATH=1 with a cache folder that cannot be written", "one line naming the "
          "folder and what to set (was: an OSError traceback)",
          "tests/test_mkl_path.py::test_a_cache_folder_that_cannot_be_written_is_one_line", "fixed"),
    Fault("K16", "dask", "a worker on another engine path (instruction set, MKL path) than the client", "one line "
          "naming both paths before the task runs; nothing cached (was: its rows stored under the client's engine key)",
          f"{_ID}::test_a_worker_on_another_engine_path_refuses_the_task", "fixed"),
    Fault("R12", "concurrency", "a publish lock held by a stopped run (SIGSTOP)", "given up after 120 s on the "
          "waiter's clock, one line naming the holder; nothing published (was: a wait without end)", "tests/test_reproduce_publish.py::test_a_publish_lock_held_by_a_stopped_or_far_run_is_given_up_in_one_line", "fixed"),
    Fault("R13", "concurrency", "another host's publish lock with an mtime an hour ahead (clock skew)", "the same: only the "
          "waiter's monotonic clock counts (was: still waiting at 241 s after saying 120 s)", "tests/test_reproduce_publish.py::test_a_publish_lock_held_by_a_stopped_or_far_run_is_given_up_in_one_line", "fixed"),
    Fault("R14", "concurrency", "a local worker process stopped with SIGSTOP mid-sweep", "named on stderr once after "
          "STOPPED_WORKER_S (30 s), with its pid and kill -CONT / kill -9 (was: no progress and no message for 186-215 s)",
          "tests/test_local_backend.py::test_a_stopped_local_worker_is_named_within_the_stated_time", "fixed"),
    Fault('R15', 'concurrency', 'a publish fails after its commit in a process that lives on; a later publish, then another run',
          'no completion by later runs exists: a failed publish leaves the old build current; the later publish gives all of its own, one build left',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[SIGTERM-build]', 'fixed'),
    Fault('R16', 'concurrency', 'a file written after a commit that is completed later',
          'nothing completes an earlier publish, so no later file is ever replaced by one (the newer-file rule is gone)',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-build]', 'fixed'),
    Fault('R22', 'concurrency', 'an old output whose mtime is ahead of the clock, then a publish',
          'replaced: mtimes are never consulted; a kill at any step leaves old or new whole',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-legacy]', 'bug'),
    Fault('W14', 'disk', 'results/tables a symlink to another file system',
          'its files are copied into the build where a hard link cannot be made; published whole',
          'tests/test_reproduce_publish.py::test_outputs_of_another_file_system_are_taken_in_by_copy', 'fixed'),
    Fault('R17', 'concurrency', 'the output folders renamed after a publish killed past its commit',
          'links are relative and name the pointer: the moved checkout reads and publishes its own build',
          'tests/test_reproduce_publish.py::test_a_moved_or_copied_checkout_reads_and_publishes_its_own_outputs', 'fixed'),
    Fault('R18', 'concurrency', 'a `cp -a` copy of folders holding a committed stage, then a publish into the copy',
          'the copy publishes into its own build; the original is untouched (no copy detection needed)',
          'tests/test_reproduce_publish.py::test_a_moved_or_copied_checkout_reads_and_publishes_its_own_outputs', 'fixed'),
    Fault('R19', 'concurrency', 'two checkouts sharing a results folder through a symlink, one publish killed past its commit',
          'old or new, whole, at every step of a publish through the second path',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-second path]', 'fixed'),
    Fault('R20', 'concurrency', 'a left stage whose pid is alive on this host (pid reuse, or a stage of another host)',
          'no stage is judged by its pid: builds no pointer names are removed under the publish lock',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[SIGHUP-build]', 'fixed'),
    Fault("E23", "settings", "a damaged mode stamp (`full\\xff`)", "one line naming the stamp; nothing written (was: "
          "read as no stamp, so a quick run overwrote full figures and restamped the folder)",
          f"{_MS}::test_a_damaged_mode_stamp_is_refused_not_read_as_no_stamp", "fixed"),
    Fault("R21", "concurrency", "two first runs (quick and full) into a new folder at once", "exactly one stamps it, the "
          "other is refused (was: both published in 1 of 5 tries)",
          f"{_MS}::test_two_first_runs_of_both_modes_cannot_both_stamp_a_new_folder", "fixed"),
    Fault("K17", "dask", "a Dask worker stopped with SIGSTOP while it holds a task", "named on stderr once it has not "
          "reported to its scheduler for SILENT_WORKER_S (30 s, the client's clock); continued, it delivers (was: no "
          "progress and no message for 186-215 s)",
          "tests/test_dask_processes.py::test_a_stopped_worker_is_named_within_the_stated_time", "fixed"),
    Fault("J35", "jena", "a full file whose January 2009 differs from the checksummed excerpt, both present", "one line "
          "naming both files and the first differing hour (was: the full file silently won, labelled as real data)",
          f"{_J}::test_a_full_file_beside_the_excerpt_must_agree_with_it_over_the_task_period[False]", "fixed"),
    # ------------------------------------------------------------------ the code that ran, bounded waits, resources
    Fault("C30", "cache", "a compute module edited keeping its size and mtime, its old .pyc left", "the module runs the "
          "bytes the code hash is taken from (a .pyc only when hash-checked against them; resgd, resgd.infra and "
          "source_hash, imported before that hook, compared with their bytecode) (was: Python ran the old .pyc, the "
          "hash named the new source: old numbers under the new code's identity)",
          f"{_CI}::test_an_edit_that_keeps_size_and_mtime_runs_the_new_code_under_the_new_hash", "bug"),
    Fault("C31", "cache", "resgd/__init__.py (imported before the hook) with stale bytecode", "recorded as stale: that "
          "process writes no cache entry and its identity matches no worker's",
          f"{_CI}::test_a_module_imported_before_the_hook_with_stale_bytecode_is_recorded_as_stale", "bug"),
    Fault("C32", "cache", "a compute module edited while a long sweep runs", "the next cache write is refused: `error: "
          "source files changed since this process started (<files>): rerun`, exit 2; a docstring edit is no change "
          "(was: later entries of the old code under the new hash)",
          f"{_CI}::test_a_cache_entry_is_not_written_once_a_compute_module_changed_on_disk", "bug"),
    Fault("C33", "cache", "the code hash as imported, a docstring or a constant edited", "a docstring edit keeps it, a "
          "constant edit changes it", f"{_CI}::test_the_imported_hash_keeps_a_docstring_edit_and_names_a_constant_edit",
          "bug"),
    Fault("K18", "dask", "a worker with stale bytecode, or sources edited after it started", "it reports the hash of the "
          "code it imported: refused in one line, exit 2 (was: passed the check, which hashed its files on disk)",
          f"{_CI}::test_a_worker_whose_imported_code_differs_from_the_client_s_refuses_the_task", "bug"),
    Fault("C34", "cache", "a 6 GB sparse file as a cache entry", "refused by its size before it is read (256 MiB, "
          "over a thousand times the largest entry), one warning line, recomputed (was: read whole into memory)",
          f"{_RC}::test_a_cache_entry_larger_than_any_resgd_writes_is_refused_before_it_is_read", "bug"),
    Fault("R23", "concurrency", "another host's cache lock dated an hour ahead (its clock)", "named at once with what to "
          "do (NTP); given up once unrefreshed for STOPPED_GIVE_UP_S on the waiter's own clock (was: waited an hour "
          "and more, silently)", f"{_FL}::test_a_lock_dated_in_the_future_is_named_at_once_and_not_waited_for_past_the_bound",
          "bug"),
    Fault("W15", "disk", "flock failing with ENOLCK (NFS without its lock service)", "one line naming the folder and how "
          "to run without shared locks (a local --results-dir / --figures-dir), exit 1 (was: 'writing a file: No "
          "locks available')", f"{_FL}::test_a_file_system_without_locks_is_named_with_what_to_do", "bug"),
    Fault("R24", "concurrency", "two runs locking the same folders named differently (a symlink), or one folder twice",
          "one global order by resolved real path, each folder once (was: opposite orders, each run waiting for the "
          "other; one folder twice waited for itself)", f"{_FL}::test_folders_are_locked_in_one_order_by_their_real_paths",
          "bug"),
    Fault("E24", "settings", "a group-shared figures folder (umask 002)", "the mode stamp is created by the umask, 0664 "
          "(was: always 0600, unreadable to the group)", f"{_MS}::test_the_mode_stamp_is_created_with_the_umask_s_mode[002]",
          "bug"),
    Fault("W16", "disk", "python -m resgd info > /dev/full", "one line naming standard output and what to do, exit 1 "
          "(was: 'writing a file: No space left on device; the disk is full ... --results-dir')",
          f"{_CLI}::test_a_standard_output_that_cannot_be_written_is_one_line_and_exit_1[dev-full]", "bug"),
    Fault("W17", "disk", "standard output a closed pipe", "one line naming standard output, exit 1 (was: 'writing a "
          "file: Broken pipe')", f"{_CLI}::test_a_standard_output_that_cannot_be_written_is_one_line_and_exit_1[closed-pipe]",
          "bug"),
    Fault("W18", "disk", "standard output closed (>&-)", "one line before any work, exit 1 (was: ran with no output, exit "
          "0, a later file could take fd 1; with RESGD_MKL_INTEL_PATH=1 a traceback)",
          f"{_CLI}::test_a_standard_output_that_cannot_be_written_is_one_line_and_exit_1[closed]",
          "bug"),
    # ------------------------------------------------------------------ labels of the data on figures
    Fault("L1", "label", "Jena loaded with check_canonical=False, then plotted", "the figure carries the NOT-canonical banner",
          "tests/test_data_banner.py::test_a_jena_file_loaded_with_check_canonical_false_is_stamped_on_the_figure", "bug"),
    Fault("L2", "label", "SST-2 loaded with verify_checksums=False", "labelled as not verified (was: as the real SST-2), stamped",
          "tests/test_data_banner.py::test_sst2_files_loaded_without_their_checksums_are_labelled_and_stamped", "bug"),
    Fault("L3", "label", "Jena on the stand-in (no file)", "said on the console before the work",
          f"{_CLI}::test_jena_on_the_standin_is_said_on_the_console", "covered"),
    Fault('P2', 'interrupt', "SIGHUP between a publish's file-system steps",
          'old or new, whole, at every step (was: results new, figures old)',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[SIGHUP-build]', 'fixed'),
    Fault('P3', 'interrupt', 'SIGTERM while a publish completes an earlier one',
          'nothing completes an earlier publish; SIGTERM at every step: old or new, whole',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[SIGTERM-legacy]', 'fixed'),
    Fault('P5', 'interrupt', 'an emptied commit record after kill -9 mid-publish',
          'no commit record exists; a forged or emptied one is removed unread (was: figures moved, new results deleted)',
          'tests/test_reproduce_publish.py::test_no_record_is_read_a_forged_stage_or_pointer_moves_nothing_from_outside', 'fixed'),
    Fault('P6', 'interrupt', 'an emptied stage record',
          "no stage record exists; an earlier version's stage folder is removed unread (was: deleted unmoved)",
          'tests/test_reproduce_publish.py::test_no_record_is_read_a_forged_stage_or_pointer_moves_nothing_from_outside', 'fixed'),
    Fault('P7', 'interrupt', 'old outputs dated +2 h (clock stepped back), kill -9 mid-publish',
          'old or new, whole, at every step: no mtime is consulted (was: 5 of 7 old files kept)',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-legacy]', 'fixed'),
    Fault('P8', 'concurrency', 'the output folders reached through a second path (bind mount), publish killed',
          'old or new, whole, at every step (was: taken for a copy, figures new and 3 of 5 results old)',
          'tests/test_reproduce_publish.py::test_a_fault_at_any_step_of_a_publish_leaves_the_old_outputs_or_the_new_ones_whole[kill -9-second path]', 'fixed'),
    Fault('P9', 'disk', 'a read-only claims/ folder of an earlier version',
          'its files taken into the build, published whole (was: failure after the commit point, tables new, figures old)',
          'tests/test_reproduce_publish.py::test_a_read_only_or_misplaced_output_folder_fails_before_the_switch_or_not_at_all', 'fixed'),
    Fault('P10', 'disk', 'a full disk while a publish writes its files',
          'one error naming the path at its real place before the switch; old outputs whole; later runs not blocked',
          'tests/test_reproduce_publish.py::test_a_read_only_or_misplaced_output_folder_fails_before_the_switch_or_not_at_all', 'fixed'),
    Fault('P11', 'disk', 'a folder where an output file goes',
          'one error naming that folder before the switch; old outputs whole; other parts still publish (was: every later run blocked, the staged file named)',
          'tests/test_reproduce_publish.py::test_a_read_only_or_misplaced_output_folder_fails_before_the_switch_or_not_at_all', 'fixed'),
    Fault('P12', 'interrupt', "a stage record holding '..' paths",
          'not read: removed with its folder; nothing outside moved or written (was: followed)',
          'tests/test_reproduce_publish.py::test_no_record_is_read_a_forged_stage_or_pointer_moves_nothing_from_outside', 'fixed'),
    Fault('P19', 'disk', 'rm -rf figures (make clean) during a quick run',
          "the publish stamps the folder it writes: a later full run is refused (was: stamped 'full' over quick figures)",
          'tests/test_reproduce_publish.py::test_figures_removed_mid_run_are_published_with_their_mode_stamp', 'fixed'),
    # ------------------------------------------------------------------ the book build by one switch
    Fault("B1", "interrupt", "a notebook cell that fails after one glue_figure and its publish",
          "the notebook's workspace is dropped whole: figures, results and its page as the last good build left "
          "them; the report says it failed (was: figures/ half rewritten, the build said only that the previous "
          "notebook was kept)",
          "tests/test_book_outputs.py::test_a_cell_failing_after_a_figure_leaves_the_previous_outputs_whole", "fixed"),
    Fault("B6", "concurrency", "two book builds at once, 01 good in one and failing in the other",
          "each publishes in one switch; the report and book/execution.md describe the pages there (was: they "
          "said 01 failed while the new 01 was good)",
          "tests/test_book_outputs.py::test_two_book_builds_at_once_publish_a_report_that_matches_their_pages", "fixed"),
    Fault("I19", "interrupt", "kill -9 at any file-system step of a book build's outputs (stage, workspace, switch)",
          "old outputs or new ones, whole (figures, results, executed notebooks, report and its page); the next "
          "build leaves one build and no stage",
          "tests/test_book_outputs.py::test_a_fault_at_any_step_of_a_book_build_leaves_the_old_outputs_or_the_new_ones_whole[1-kill -9]",
          "bug"),
    Fault("I20", "interrupt", "SIGTERM, SIGHUP or SIGINT at any file-system step of a book build's outputs",
          "old outputs or new ones, whole; exit 143/129/130; the next build leaves one build and no stage",
          "tests/test_book_outputs.py::test_a_fault_at_any_step_of_a_book_build_leaves_the_old_outputs_or_the_new_ones_whole[3-SIGTERM]",
          "bug"),
    Fault("B2", "concurrency", "a notebook's kernel stopped with SIGSTOP", "named on stderr once it has been stopped "
          "for STOPPED_KERNEL_S (30 s), with its pid and kill -CONT / kill -9 (was: 150 s and more without a word, "
          "until the 30-min or 4-h timeout)",
          "tests/test_notebook_run.py::test_a_stopped_kernel_is_named_with_what_to_do", "fixed"),
    Fault("B5", "settings", "a broken MyST/YAML header in a notebook", "one `error:` line naming the file, the line "
          "and the problem, exit 2 (was: a 69-line YAML traceback)",
          "tests/test_book_build.py::test_a_broken_notebook_header_is_one_error_line", "fixed"),
    Fault("I21", "interrupt", "SIGHUP to the whole process group mid-sweep (a closed terminal)", "one line, exit 129, "
          "no worker left: loky's resource tracker and the workers ignore SIGHUP, the run ends them (was: the "
          "tracker died, its replacement printed 9 KeyError tracebacks)",
          "tests/test_local_backend.py::test_sighup_to_the_process_group_mid_sweep_is_one_line_and_no_worker_outlives_it",
          "fixed"),
    Fault("I22", "interrupt", "a local worker process killed again and again", "one line saying how often, what is "
          "kept and what to do (fewer --jobs, more memory), exit 1 (was: a 14-frame RuntimeError traceback)",
          "tests/test_local_backend.py::test_a_worker_pool_that_dies_again_and_again_is_one_line", "fixed"),
    Fault('P22', 'concurrency', 'a cache lock held by something whose owner record cannot be read',
          'named within 10 s with what to do, given up once unrefreshed for 120 s (was: waited without end or word)',
          'tests/test_file_lock.py::test_a_lock_whose_owner_record_cannot_be_read_is_named_then_given_up', 'fixed'),
    Fault('P23', 'disk', 'quick and full outputs of one figures folder',
          "each mode's build under its own pointer",
          'tests/test_reproduce_publish.py::test_quick_and_full_builds_live_under_their_own_pointers', 'fixed'),
    Fault("K19", "dask", "the Dask scheduler stopped (SIGSTOP) mid-sweep, its connection open",
          "named on stderr once it has left the watch's question unanswered for SILENT_SCHEDULER_S (20 s), with what "
          "to do; continued, the sweep ends (was: 196 s and more without a word, the watch's own query blocked)",
          f"{_DP}::test_a_stopped_scheduler_is_named_within_the_stated_time", "fixed"),
    Fault("W19", "disk", "ulimit -n 24 (soft and hard) under a pool of two local workers",
          "one `error:` line before any worker starts, naming the limit and what to do (raise it, or --jobs 1), exit 1; "
          "a low soft limit under a higher hard one is raised to what the pool needs (was: an error naming a joblib "
          "file, then each half-made worker's traceback)",
          f"{_LB}::test_an_open_file_limit_too_low_for_the_pool_is_one_line_or_raised[hard-24]", "fixed"),
)


def summary() -> dict[str, dict[str, int]]:
    """family → status → how many faults (the catalogue's table)."""
    table = {family: dict.fromkeys(STATUSES, 0) for family in FAMILIES}
    for fault in FAULTS:
        table[fault.family][fault.status] += 1
    return table


if __name__ == "__main__":  # the closing note's table: python tests/faults/catalogue.py
    print("| family | " + " | ".join(STATUSES) + " | total |")
    print("| --- |" + " ---: |" * (len(STATUSES) + 1))
    for family, counts in summary().items():
        print(f"| {family} | " + " | ".join(str(counts[s]) for s in STATUSES) + f" | {sum(counts.values())} |")
    totals = [sum(1 for f in FAULTS if f.status == s) for s in STATUSES]
    print("| all | " + " | ".join(map(str, totals)) + f" | {len(FAULTS)} |")
