// Every page: buttons that open a <dialog> (data-open="<dialog id>") and close it (data-close).
document.addEventListener("click", (event) => {
  const opener = event.target.closest("[data-open]");
  if (opener) {
    const dialog = document.getElementById(opener.dataset.open);
    if (dialog && dialog.showModal) dialog.showModal();
    return;
  }
  const closer = event.target.closest("dialog [data-close]");
  if (closer) closer.closest("dialog").close();
});
